package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// installCmd copies this executable to DIR/restart-supervisor. The init
// container of a wrapped pod runs it, so the supervisor image needs no
// shell or cp. The copy is written to a temporary file in DIR, synced and
// renamed, so a reader never sees a half-written binary.
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
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	dst := filepath.Join(dir, contract.BinaryName)
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
	if err := tmp.Chmod(0o755); err != nil {
		return "", err
	}
	if err := tmp.Sync(); err != nil {
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", err
	}
	ok = true
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return dst, nil
}
