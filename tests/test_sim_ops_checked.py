"""The team's kernels through the public ops API in the simulator's checking mode (random
fiber order): no finding, and outputs bit-identical to the unchecked forward-order run.
Guards both the kernels and the checker against false positives. Small odd shapes so
edge rows, partial threadgroups and padding are exercised."""
import numpy as np
import pytest

import mpskern
from mpskern import backends, sim

pytestmark = pytest.mark.skipif(not sim.available()[0], reason="no host C++ compiler")

rng = np.random.default_rng(0)
X = rng.standard_normal((2, 3, 9, 11)).astype(np.float32)
W = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
ONES3, ZEROS3 = np.ones(3, np.float32), np.zeros(3, np.float32)
MASK = rng.random((3, 9, 9)) > 0.3

CASES = {
    "matmul": lambda x: mpskern.matmul(x.reshape(6, 99)[:, :37], x.reshape(99, 6)[:37], backend="sim"),
    "linear": lambda x: mpskern.linear(x[:, :, :5], W.reshape(12, 9)[:7, :2].repeat(
        6, axis=1)[:, :11].astype(x.dtype), ONES3[:1].repeat(7), backend="sim"),
    "conv2d": lambda x: mpskern.conv2d(x, W.astype(x.dtype), stride=2, padding=1, backend="sim"),
    "softmax": lambda x: mpskern.softmax(x, axis=-1, backend="sim"),
    "softmax_axis1": lambda x: mpskern.softmax(x, axis=1, backend="sim"),
    "log_softmax": lambda x: mpskern.log_softmax(x.reshape(6, 99), axis=-1, backend="sim"),
    "layer_norm": lambda x: mpskern.layer_norm(x, (11,), backend="sim"),
    "rms_norm": lambda x: mpskern.rms_norm(x, (9, 11), backend="sim"),
    "group_norm": lambda x: mpskern.group_norm(x, 3, backend="sim"),
    "batch_norm_train": lambda x: mpskern.batch_norm(x, ZEROS3.copy(), ONES3.copy(), training=True,
                                                     backend="sim"),
    "max_pool": lambda x: mpskern.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True, backend="sim"),
    "attention_causal": lambda x: mpskern.scaled_dot_product_attention(
        x, x[:, :, 2:], x[:, :, 2:, :5], is_causal=True, backend="sim"),
    "attention_gqa_mask": lambda x: mpskern.scaled_dot_product_attention(
        x, x[:, :1], x[:, :1, :, :6], attn_mask=MASK, backend="sim"),
    "avg_pool": lambda x: mpskern.avg_pool2d(x, 2, stride=1, padding=1, count_include_pad=False,
                                             backend="sim"),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("name", sorted(CASES))
def test_op_passes_the_checking_mode(name, dtype):
    be = backends.get("sim")
    x = X.astype(dtype)
    try:
        be.set_sim_options()
        ref = CASES[name](x)
        be.set_sim_options(check_mode=True, order="random", seed=11)
        got = CASES[name](x)
    finally:
        be.set_sim_options()
    assert np.asarray(got).tobytes() == np.asarray(ref).tobytes()
