package contract

import (
	"fmt"
	"strings"
)

// Kinds of pod member in EnvPodMembers.
const (
	// MemberSidecar is a native sidecar (an init container with
	// restartPolicy Always): it starts before the regular containers.
	MemberSidecar = "sidecar"
	// MemberRegular is a regular container.
	MemberRegular = "regular"
	// MemberInit is the re-run of a regular init container: a native
	// sidecar the injector adds right after the init container, with its
	// image, command and mounts, that runs nothing on the pod's first
	// start (the kubelet has just run the init container itself) and runs
	// the init container's command again on every pod restart, before the
	// members after it start. It counts as started for a round only once
	// that run has succeeded.
	MemberInit = "init"
)

// InitRerunSuffix names the re-run sidecar of an init container:
// "<init container>" + InitRerunSuffix.
const InitRerunSuffix = "-rerun"

// PodMember is one entry of EnvPodMembers.
type PodMember struct {
	Name string
	Kind string
}

// MaxPodMembers bounds EnvPodMembers: the supervisor refuses a longer
// list, and the injector and compose refuse a pod (or Compose file) with
// more members. The API server sets no limit on a pod's containers; a pod
// restart's round walks every member's status document, and the list of
// 1024 names of 63 characters is 73 KiB, under the 128 KiB the kernel
// allows one environment string (MAX_ARG_STRLEN).
const MaxPodMembers = 1024

// FormatPodMembers writes EnvPodMembers: "name:kind" entries separated by
// commas, in start order.
func FormatPodMembers(members []PodMember) string {
	parts := make([]string, len(members))
	for i, m := range members {
		parts[i] = m.Name + ":" + m.Kind
	}
	return strings.Join(parts, ",")
}

// ParsePodMembers reads EnvPodMembers. Names are not checked here beyond
// being non-empty and free of the separators; the reader checks them as
// container names.
func ParsePodMembers(s string) ([]PodMember, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	entries := strings.Split(s, ",")
	if len(entries) > MaxPodMembers {
		return nil, fmt.Errorf("more than %d pod members", MaxPodMembers)
	}
	out := make([]PodMember, 0, len(entries))
	seen := map[string]bool{}
	for _, e := range entries {
		name, kind, ok := strings.Cut(strings.TrimSpace(e), ":")
		if !ok || name == "" {
			return nil, fmt.Errorf("pod member %q: want name:kind", e)
		}
		if kind != MemberSidecar && kind != MemberRegular && kind != MemberInit {
			return nil, fmt.Errorf("pod member %q: kind must be %s, %s or %s", e, MemberSidecar, MemberInit, MemberRegular)
		}
		if seen[name] {
			return nil, fmt.Errorf("pod member %q listed twice", name)
		}
		seen[name] = true
		out = append(out, PodMember{Name: name, Kind: kind})
	}
	return out, nil
}
