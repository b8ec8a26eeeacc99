package rules

import (
	"fmt"
	"strconv"
	"strings"
)

// KubeVersion is the Kubernetes minor release (1.N) whose API-server
// validation of the restart fields is reproduced: the messages and the
// shapes it accepts differ between releases. The zero value means
// NewestKube.
//
// Each release is taken with its default feature gates, except that
// ContainerRestartRules, alpha and off by default in 1.34, is taken as on:
// with it off a 1.34 API server drops the fields instead of validating them.
// So RestartAllContainersOnContainerExits (alpha in 1.35, beta in 1.36,
// pkg/features/kube_features.go:1720-1722@v1.35.4, :1903-1906@v1.36.3) is
// off for 1.35 and on from 1.36.
type KubeVersion int

// The releases whose validation is known. 1.37 validates like 1.36
// (pkg/apis/core/validation/validation.go:3419-3450 and :3797-3837@v1.37.2
// are the code of :3310-3341 and :3677-3717@v1.36.3).
const (
	Kube134 KubeVersion = 34
	Kube135 KubeVersion = 35
	Kube136 KubeVersion = 36
	Kube137 KubeVersion = 37

	// OldestKube is the first release with the restart fields (KEP-5307).
	OldestKube = Kube134
	// NewestKube is the default of the CLI and the supervisor.
	NewestKube = Kube137
)

// KubeVersions lists the known releases, oldest first.
func KubeVersions() []KubeVersion {
	var vs []KubeVersion
	for v := OldestKube; v <= NewestKube; v++ {
		vs = append(vs, v)
	}
	return vs
}

func (v KubeVersion) orNewest() KubeVersion {
	if v == 0 {
		return NewestKube
	}
	return v
}

// String gives the release as "1.N".
func (v KubeVersion) String() string { return "1." + strconv.Itoa(int(v.orNewest())) }

// Type, with Set and String, makes a *KubeVersion a pflag.Value.
func (v *KubeVersion) Type() string { return "version" }

// Set and String make a *KubeVersion a flag.Value.
func (v *KubeVersion) Set(s string) error {
	p, err := ParseKubeVersion(s)
	if err != nil {
		return err
	}
	*v = p
	return nil
}

func knownVersions() string {
	var s []string
	for _, v := range KubeVersions() {
		s = append(s, v.String())
	}
	return strings.Join(s, ", ")
}

// parseMinor reads the minor number of "1.N", "v1.N", "v1.N.P" or a
// vendor's "v1.N.P-suffix" / "v1.N+".
func parseMinor(s string) (int, error) {
	t := strings.TrimPrefix(strings.TrimSpace(s), "v")
	major, rest, ok := strings.Cut(t, ".")
	if !ok || major != "1" {
		return 0, fmt.Errorf("version %q: want a Kubernetes release 1.N (such as %s)", s, NewestKube)
	}
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	if end == 0 || end > 4 {
		return 0, fmt.Errorf("version %q: want a Kubernetes release 1.N (such as %s)", s, NewestKube)
	}
	if tail := rest[end:]; tail != "" && tail[0] != '.' && tail[0] != '-' && tail[0] != '+' {
		return 0, fmt.Errorf("version %q: want a Kubernetes release 1.N (such as %s)", s, NewestKube)
	}
	return strconv.Atoi(rest[:end])
}

// ParseKubeVersion reads a release given as "1.36", "v1.36" or "v1.36.3".
// Only the known releases are accepted.
func ParseKubeVersion(s string) (KubeVersion, error) {
	m, err := parseMinor(s)
	if err != nil {
		return 0, err
	}
	if m < int(OldestKube) || m > int(NewestKube) {
		return 0, fmt.Errorf("version %q: known versions are %s", s, knownVersions())
	}
	return KubeVersion(m), nil
}

// ServerKubeVersion maps the gitVersion an API server reports (such as
// "v1.35.4" or "v1.36.3-gke.1200") to the release to validate like. A
// release newer than NewestKube is taken as NewestKube; one older than
// OldestKube has no restart fields and is an error.
func ServerKubeVersion(gitVersion string) (KubeVersion, error) {
	m, err := parseMinor(gitVersion)
	if err != nil {
		return 0, err
	}
	switch {
	case m < int(OldestKube):
		return 0, fmt.Errorf("server version %s has no container restart rules (added in Kubernetes %s)", gitVersion, OldestKube)
	case m > int(NewestKube):
		return NewestKube, nil
	}
	return KubeVersion(m), nil
}

// checks is what differs between releases in the validation of the restart
// fields, all in pkg/apis/core/validation/validation.go.
type checks struct {
	// tooMany: more than 20 rules or 255 values is field.TooMany
	// ("Too many: 21: must have at most 20 items", :3691 and :3710@v1.36.3),
	// not field.TooLong ("Too long: may not be more than 20 bytes", :3610
	// and :3627@v1.34.4, :3697 and :3716@v1.35.4).
	tooMany bool
	// restartAll is PodValidationOptions.AllowRestartAllContainers (gate
	// RestartAllContainersOnContainerExits, pkg/api/pod/util.go:433@v1.35.4):
	// the action RestartAllContainers, and rules on sidecars, validated like
	// any other container's (:3329-3330@v1.35.4) instead of Forbidden
	// (:3249-3254@v1.34.4, :3331-3333@v1.35.4).
	restartAll bool
	// actionListsAllowed: an unsupported action's message lists the actions
	// allowed (:3700@v1.36.3); 1.35 always lists "Restart" alone, even
	// when RestartAllContainers is allowed (:3706@v1.35.4), and 1.34 knows
	// no other action (:3615-3618@v1.34.4).
	actionListsAllowed bool
	// initWithoutPolicy: rules on an init container without a restartPolicy
	// are Required to have one (:3320-3323@v1.35.4); 1.34 validates an
	// init container's restart fields only when it has a restartPolicy
	// (validateInitContainers, :3736-3739@v1.34.4), so they pass unchecked.
	initWithoutPolicy bool
	// groupAction: the action RestartGroup is accepted (ValidateCarried):
	// the supervisor's config and the annotation carrier, never the API
	// fields.
	groupAction bool
}

func (v KubeVersion) checks() checks {
	v = v.orNewest()
	return checks{
		tooMany:            v >= Kube136,
		restartAll:         v >= Kube136,
		actionListsAllowed: v >= Kube136,
		initWithoutPolicy:  v >= Kube135,
	}
}
