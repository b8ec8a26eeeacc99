package supervise

import (
	"bytes"
	"encoding/hex"
	"hash/fnv"

	"github.com/restart-supervisor/restart-supervisor/internal/boundedfile"
)

// The resources in the back-off's key. The kubelet keys a container's
// CrashLoopBackOff by the pod, the container's name, its image and its
// resources (GetBackoffKey, pkg/kubelet/kuberuntime/helpers.go:193-207,
// v1.37.2), taken from the allocated pod: after a resize, in place or with
// a restart, the next start finds no entry under the new key, starts at
// once and begins a fresh curve. The supervisor cannot read the pod; it
// reads what the kubelet made of the resources in the container's cgroup:
// the CPU quota (from the CPU limit), the CPU weight (from the request)
// and the memory limit. When they differ from those the curve's last step
// was taken under, the curve starts over (backoff.next). A resize of the
// memory request alone leaves no trace in the cgroup and is not seen; nor
// is an image change (docs/supervisor.md).

// maxResourceFile bounds the read of one cgroup file: a short line.
const maxResourceFile = 256

// ContainerResourceFiles returns the files of the container's cgroup that
// hold its CPU quota and weight and its memory limit, found as
// ContainerMemoryEvents finds the OOM counter; none where there is no
// such cgroup.
func ContainerResourceFiles() []string {
	return resourceFilesOf("/proc/self/cgroup", "/sys/fs/cgroup")
}

func resourceFilesOf(procCgroup, root string) []string {
	var files []string
	// first keeps the first of candidates that can be read: on cgroup v1
	// the path named (a process outside a container), else the top of
	// the controller's mount (a container's own cgroup).
	first := func(candidates ...string) {
		for _, p := range candidates {
			if _, err := boundedfile.Read(p, "a cgroup resource file", maxResourceFile, false); err == nil {
				files = append(files, p)
				return
			}
		}
	}
	eachCgroup(procCgroup, func(unified bool, controllers []byte, dir string) {
		switch {
		case unified:
			for _, f := range []string{"cpu.max", "cpu.weight", "memory.max"} {
				first(root + dir + "/" + f)
			}
		case hasController(controllers, "memory"):
			first(root+"/memory"+dir+"/memory.limit_in_bytes", root+"/memory/memory.limit_in_bytes")
		case hasController(controllers, "cpu"):
			for _, f := range []string{"cpu.cfs_quota_us", "cpu.shares"} {
				first(root+"/cpu"+dir+"/"+f, root+"/cpu/"+f)
			}
		}
	})
	return files
}

// resourcesKey is what the files hold now, hashed (FNV-1a 64, 16 hex
// digits); "" when there are none or one cannot be read, which changes
// nothing in the curve.
func resourcesKey(files []string) string {
	if len(files) == 0 {
		return ""
	}
	h := fnv.New64a()
	for _, p := range files {
		data, err := boundedfile.Read(p, "a cgroup resource file", maxResourceFile, false)
		if err != nil {
			return ""
		}
		h.Write([]byte(p))
		h.Write([]byte{0})
		h.Write(bytes.TrimSpace(data))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// resourcesKey is the container's resources key now.
func (s *supervisor) resourcesKey() string { return resourcesKey(s.o.ResourceFiles) }

// ValidBackoffKey reports whether k can be a key resourcesKey made: the
// status document that carries it to the next supervisor is written by
// the container's UID, and anything else in its place is dropped.
func ValidBackoffKey(k string) bool {
	if len(k) != 16 {
		return false
	}
	_, err := hex.DecodeString(k)
	return err == nil
}
