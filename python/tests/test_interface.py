"""Zero-copy inputs and outputs, the exceptions and their messages, threads and
the GIL."""
import threading
import time
import tracemalloc

import numpy as np
import pytest

import kappa


def traced_peak(f):
    """Peak bytes numpy allocated (numpy reports its buffers to tracemalloc)
    while f() ran; kappa's own results are Eigen's memory, not numpy's."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        r = f()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return peak, r


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_inputs_are_not_copied(dtype):
    rng = np.random.default_rng(1)
    n, d = 2048, 64
    q, k, v = (rng.standard_normal((n, d)).astype(dtype) for _ in range(3))
    size = q.nbytes
    kappa.attention(q[:4], k[:4], v[:4])  # warm up (first-call allocations)
    peak, y = traced_peak(lambda: kappa.attention(q, k, v, mask="causal"))
    assert peak < size / 4, f"numpy allocated {peak} bytes for inputs of {size} bytes each"
    # The test can fail: a Fortran-ordered input is converted (one copy).
    qf = np.asfortranarray(q)
    peak_f, y_f = traced_peak(lambda: kappa.attention(qf, k, v, mask="causal"))
    assert peak_f >= size
    np.testing.assert_array_equal(y, y_f)


def test_outputs_are_not_copied():
    q = np.ones((3, 2), dtype=np.float32)
    y = kappa.attention(q, q, q)
    # The array does not own its data: its base is the capsule holding the
    # Eigen matrix kappa computed into.
    assert not y.flags.owndata
    assert type(y.base).__name__ == "PyCapsule"
    assert y.flags.c_contiguous and y.flags.writeable
    d = kappa.attention_details(q, q, q)
    for arr in (d.scores, d.normalizer, d.weights, d.row_shift, d.output):
        assert type(arr.base).__name__ == "PyCapsule"
    # attributes return the same arrays, not copies
    assert np.shares_memory(d.A, d.scores) and np.shares_memory(d.Y, d.output)
    # a large result: numpy allocates nothing for it
    big = np.ones((1024, 64), dtype=np.float32)
    peak, y = traced_peak(lambda: kappa.attention(big, big, big))
    assert peak < y.nbytes / 4


def test_exception_classes():
    assert issubclass(kappa.ShapeError, ValueError)
    assert issubclass(kappa.RangeError, ValueError) and issubclass(kappa.RangeError, IndexError)
    assert issubclass(kappa.FormatError, ValueError) and issubclass(kappa.FormatError, OSError)
    assert kappa.ShapeError.__module__ == "kappa"


def test_shape_error_keeps_kappa_message():
    with pytest.raises(kappa.ShapeError) as e:
        kappa.attention(np.zeros((4, 8)), np.zeros((5, 7)), np.zeros((5, 3)))
    assert str(e.value) == ("kappa: attention: Q is (4 x 8) but K is (5 x 7) (Q and K must have "
                            "the same number of columns, d_QK)")
    with pytest.raises(kappa.ShapeError, match="2-D"):
        kappa.attention(np.zeros(4), np.zeros((5, 7)), np.zeros((5, 3)))
    with pytest.raises(kappa.ShapeError, match="KeyPaddingMask"):
        kappa.attention(np.zeros((2, 2)), np.zeros((3, 2)), np.zeros((3, 2)), mask="padding",
                        lengths=[1, 2, 3])


def test_range_error_keeps_kappa_message():
    with pytest.raises(kappa.RangeError, match="KeyPaddingMask valid length 4 is out of range"):
        kappa.attention(np.zeros((2, 2)), np.zeros((3, 2)), np.zeros((3, 2)), mask="padding",
                        lengths=4)
    with pytest.raises(IndexError):  # the same error, caught as IndexError
        kappa.attention(np.zeros((2, 2)), np.zeros((3, 2)), np.zeros((3, 2)), mask="padding",
                        lengths=-1)


def test_format_error_keeps_kappa_message(tmp_path):
    bad = tmp_path / "encoder.json"
    bad.write_text("{not json")
    merges = tmp_path / "vocab.bpe"
    merges.write_text("#version: 0.2\n")
    with pytest.raises(kappa.FormatError, match="encoder.json"):
        kappa.BpeTokenizer.from_gpt2_files(str(bad), str(merges))
    with pytest.raises(OSError, match="cannot open"):
        kappa.BpeTokenizer.from_gpt2_files(str(tmp_path / "missing.json"), str(merges))
    with pytest.raises(kappa.FormatError):
        kappa.Model.load(str(tmp_path))


def test_threads_setting_and_results_independent_of_it():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((700, 32)).astype(np.float32) for _ in range(3))
    before = kappa.num_threads()
    try:
        assert kappa.set_num_threads(1) == 1 and kappa.num_threads() == 1
        y1 = kappa.attention(q, k, v, mask="causal")
        n = kappa.set_num_threads(2)
        assert n == (2 if kappa.has_openmp() else 1) and kappa.num_threads() == n
        y2 = kappa.attention(q, k, v, mask="causal")
        np.testing.assert_array_equal(y1, y2)  # bitwise: rows are split, not sums
    finally:
        kappa.set_num_threads(before)


def test_gil_is_released_during_computation():
    """Another Python thread runs while kappa computes: with the GIL held it
    could not advance at all during the call."""
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((1500, 64)) for _ in range(3))
    t0 = time.perf_counter()
    kappa.attention(q, k, v)
    single = time.perf_counter() - t0
    ticks = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.0005)

    reps = max(1, int(0.3 / max(single, 1e-4)))
    th = threading.Thread(target=spin)
    th.start()
    time.sleep(0.01)
    start = time.perf_counter()
    for _ in range(reps):
        kappa.attention(q, k, v)
    end = time.perf_counter()
    stop.set()
    th.join()
    during = [t for t in ticks if start < t < end]
    # with the GIL held the thread could only tick between calls (reps times)
    assert len(during) > reps + 5, (len(during), reps)


def test_version():
    assert kappa.__version__.count(".") == 2
