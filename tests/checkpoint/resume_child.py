"""Child process of the exact-resume test: load the step-k checkpoint, train to N, save.

python resume_child.py OPT CKPT K N OUT
"""

from __future__ import annotations

import sys

from ckpt_helpers import batches, make_cnn, train

if __name__ == "__main__":
    opt_name, ckpt, k, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    m, tx, ty = make_cnn(opt_name, seed=99)  # different init and RNG: the checkpoint must fix both
    aux = m.load_states(ckpt)
    assert aux["step"] == k and m.optimizer.step_counter == k, (aux, m.optimizer.step_counter)
    train(m, tx, ty, batches(n), k, n)
    m.save_states(out, {"step": n})
