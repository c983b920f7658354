// mk_mps_softmax.m: softmax / log_softmax on MPSGraph along the middle axis of x viewed as
// (outer, n, inner). float16 is computed in float32 (cast in the graph) so the sums
// accumulate as our kernels do. log_softmax is x - max - log(sum(exp(x - max))): MPSGraph
// has no log-softmax op before macOS 14, and log(softmax) would underflow to -inf.
#import "mk_mps.h"

#define OP "mk_mps_softmax"

mk_status mk_mps_softmax(mk_device *d, const mk_softmax_args *a, int dtype, mk_buffer *x,
                         mk_buffer *y, mk_timing *t) {
    return mk_mps_op(OP, d, dtype, t, ^mk_status(int *empty) {
        return mk_mps_softmax_check(a, empty);
    }, ^mk_status {
        MKGraph *g = mk_mps_graph_get(d, OP, dtype, a, sizeof *a, ^MKGraph *{
            MPSGraph *G = [MPSGraph new];
            MPSDataType dt = mk_mps_dtype(dtype);
            MPSGraphTensor *tx = [G placeholderWithShape:MK_SHAPE(a->outer, a->n, a->inner) dataType:dt name:@"x"];
            MPSGraphTensor *v = mk_mps_to32(G, tx);
            if (a->log) {
                MPSGraphTensor *m = [G reductionMaximumWithTensor:v axis:1 name:@"max"];
                MPSGraphTensor *s = [G subtractionWithPrimaryTensor:v secondaryTensor:m name:@"shifted"];
                MPSGraphTensor *sum = [G reductionSumWithTensor:[G exponentWithTensor:s name:nil] axis:1 name:@"sum"];
                v = [G subtractionWithPrimaryTensor:s secondaryTensor:[G logarithmWithTensor:sum name:nil] name:@"logsm"];
            } else {
                v = [G softMaxWithTensor:v axis:1 name:@"softmax"];
            }
            return mk_mps_graph_of(G, @[tx], @[mk_mps_from32(G, v, dt)]);
        });
        if (!g) return MK_ERR_UNSUPPORTED;
        mk_buffer *in[1] = {x}, *out[1] = {y};
        return mk_mps_graph_run(d, g, in, out, t, OP);
    });
}
