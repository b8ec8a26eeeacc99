package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// installCmd copies this executable to DIR/restart-supervisor, and
// restart-probe from this executable's directory (the supervisor image's
// /restart-probe) to DIR/restart-probe. The init container of a wrapped
// pod runs it, so the supervisor image needs no shell or cp. Each copy is
// written to a temporary file in DIR, synced and renamed, so a reader
// never sees a half-written binary.
func installCmd(args []string) int {
	if len(args) != 1 || args[0] == "" || args[0][0] == '-' {
		return usageError("usage: restart-supervisor install DIR")
	}
	dst, err := install(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "restart-supervisor: install: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "restart-supervisor: installed %s\n", dst)
	probe, err := installProbe(args[0])
	switch {
	case err != nil:
		fmt.Fprintf(os.Stderr, "restart-supervisor: install: %v\n", err)
		return 1
	case probe == "":
		fmt.Fprintf(os.Stderr, "restart-supervisor: no %s next to this binary; httpGet and tcpSocket probe checks will fail\n", contract.ProbeBinaryName)
	default:
		fmt.Fprintf(os.Stderr, "restart-supervisor: installed %s\n", probe)
	}
	return 0
}

func install(dir string) (string, error) {
	src, err := os.Open("/proc/self/exe")
	if err != nil {
		exe, err2 := os.Executable()
		if err2 != nil {
			return "", err
		}
		if src, err = os.Open(exe); err != nil {
			return "", err
		}
	}
	defer src.Close()
	return installFile(src, dir, contract.BinaryName)
}

// installProbe copies restart-probe from this executable's directory into
// dir; it returns "" when there is none to copy.
func installProbe(dir string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil
	}
	src, err := os.Open(filepath.Join(filepath.Dir(exe), contract.ProbeBinaryName))
	if err != nil {
		return "", nil
	}
	defer src.Close()
	if fi, err := src.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", nil
	}
	return installFile(src, dir, contract.ProbeBinaryName)
}

func installFile(src *os.File, dir, name string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	dst := filepath.Join(dir, name)
	tmp, err := os.CreateTemp(dir, ".restart-supervisor-*")
	if err != nil {
		return "", err
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, src); err != nil {
		return "", err
	}
	// Read and execute only: nothing is meant to change the binary that
	// every wrapped container runs as PID 1. (The volume is mounted
	// read-only in every container but this one; the mode says the same
	// to whoever looks.)
	if err := tmp.Chmod(0o555); err != nil {
		return "", err
	}
	// No fsync of the file or the directory: the volume is an emptyDir
	// whose content matters only while its sandbox lives. A node that
	// crashes gives every pod a new sandbox, and the kubelet runs the init
	// containers, this copy among them, again before any container that
	// runs the binary; the rename keeps a half-written file from ever
	// being found at dst meanwhile. The two fsyncs were most of the
	// install container's own run (docs/benchmarks.md, "Pod start").
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", err
	}
	ok = true
	return dst, nil
}
