//go:build !unix

package webhook

// cgroupOpenFlags: no cgroup file system where there is no Unix (the
// webhook runs in a Linux image; the CLI that links this package on
// Windows never reads memory.max).
const cgroupOpenFlags = 0
