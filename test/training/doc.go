// Package training runs examples/training (PyTorch DDP over gloo, Debian's
// python3-torch) under the real supervisor binary, one supervisor per rank
// as one container per pod would have, on loopback: a fault in one rank,
// the rank restarted in place by its rule, its peer's collective failing
// and restarted by its own, both resuming from the last checkpoint. It
// measures the time from the fault to the first step completed after the
// resume, the steps lost, and whether the final loss equals an unfaulted
// run's, and writes docs/training-process.md with -update.
//
// TestRanksRestartedInPlace, one faulted run and its checks, is in `make
// test` (hack/test.sh installs python3-torch); the table of
// TestInPlaceRecovery needs -tags training:
//
//	make training   (installs python3-torch, runs this with -tags training)
package training
