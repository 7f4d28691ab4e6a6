"""The trainer's data cursor: the batch is a pure function of the step."""

from rlrouter.trainer.router_r1 import batch_indices


def test_data_cursor_is_a_pure_function_of_step():
    a = [batch_indices(10, 4, s, seed=3) for s in range(6)]
    assert a == [batch_indices(10, 4, s, seed=3) for s in range(6)]
    flat = [i for b in a for i in b]
    assert sorted(flat[:10]) == list(range(10))  # epoch 0 is a permutation
    assert batch_indices(10, 4, 2, seed=3) != batch_indices(10, 4, 2, seed=4)
