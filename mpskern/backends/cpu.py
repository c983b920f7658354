"""Backend "cpu": mpskern's C kernels (objc/cpu/) through _native."""
from mpskern import _native
from mpskern.backends.base import Backend


class CpuBackend(Backend):
    def availability(self):
        return True, f"mpskern C kernels, {_native.cpu_get_num_threads()} thread(s)"

    def gemm(self, args, dtype, A, B, C, out):
        _native.cpu_gemm(args, dtype, A, B, C, out)

    def conv2d(self, args, dtype, x, w, bias, y):
        _native.cpu_conv2d(args, dtype, x, w, bias, y)

    def pool2d(self, args, dtype, x, y):
        _native.cpu_pool2d(args, dtype, x, y)

    def softmax(self, args, dtype, x, y):
        _native.cpu_softmax(args, dtype, x, y)

    def rownorm(self, args, dtype, x, weight, bias, y):
        _native.cpu_rownorm(args, dtype, x, weight, bias, y)

    def group_norm(self, args, dtype, x, weight, bias, y):
        _native.cpu_group_norm(args, dtype, x, weight, bias, y)

    def batch_norm(self, args, dtype, x, running_mean, running_var, weight, bias, y):
        _native.cpu_batch_norm(args, dtype, x, running_mean, running_var, weight, bias, y)


def create(name):
    return CpuBackend(name)
