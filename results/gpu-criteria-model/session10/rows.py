"""Issue 16's row-op and pool criterion (>= 90% of device loads at vector width, coalescing
>= 90%) at representative shapes, float32 and float16, rows of a length that is and is not a
multiple of 4; simulator profiling mode, 16 threadgroups sampled, packaged defaults.
    python results/gpu-criteria-model/session10/rows.py > rows.txt"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".."))
os.environ["MPSKERN_TUNING_DB"] = os.path.join(tempfile.mkdtemp(), "none.json")
from mpskern.profiling.run import profile_op  # noqa: E402

CASES = [("softmax", "4096,1024"), ("softmax", "512,1001"), ("log_softmax", "4096,1024"),
         ("log_softmax", "512,1001"), ("layer_norm", "4096,1024"), ("layer_norm", "512,1001"),
         ("rms_norm", "4096,1024"), ("rms_norm", "512,1001"), ("batch_norm", "8,256,14,14"),
         ("batch_norm", "8,64,7,7"), ("group_norm", "8,256,28,28,G=32"),
         ("group_norm", "1,64,7,7,G=8"), ("max_pool2d", "1,64,112,112,3,2,1"),
         ("max_pool2d", "1,64,55,55,3,2,1"), ("avg_pool2d", "1,64,112,112,3,2,1"),
         ("avg_pool2d", "1,64,55,55,3,2,1")]
for op, shape in CASES:
    for dtype in ("float32", "float16"):
        prof, info = profile_op(op, shape, dtype, family=7, max_groups=16)
        for d in prof.dispatches:
            ld = d["device"]["load"]
            ok = ld["vector"] >= 0.9 and ld["coalescing"] >= 0.9
            print(json.dumps(dict(op=op, shape=shape, dtype=dtype, kernel=d["kernel"],
                                  load_vector=round(ld["vector"], 3),
                                  coalescing=round(ld["coalescing"], 3),
                                  div_in_loops=d["int_div"]["in_loops"],
                                  meets=ok)), flush=True)
