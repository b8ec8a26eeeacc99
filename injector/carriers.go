package injector

import (
	"fmt"
	"strconv"
	"strings"

	// The library for YAML text (see the package documentation); the
	// annotation is decoded with the same one that reads the manifests.

	corev1 "k8s.io/api/core/v1"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/internal/oneline"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// Kind is the role of a container in its pod.
type Kind string

const (
	KindInit    Kind = "init"
	KindSidecar Kind = "sidecar" // init container with restartPolicy Always
	KindRegular Kind = "regular"
)

// ContainerRules are the restart fields of one container after both
// carriers were merged and validated.
type ContainerRules struct {
	Name  string
	Kind  Kind
	Index int    // in spec.initContainers or spec.containers
	Field string // API field path, e.g. spec.containers[0]
	Rules rules.Container
	// Ruled reports whether the container carries restart fields that the
	// kubelet of an older cluster would not honour, i.e. must be wrapped.
	Ruled bool
	// KubeletPolicy is what the kubelet applies to this container when
	// it has no restartPolicy of its own: the pod policy for regular
	// containers, OnFailure (Never in a Never pod) for init containers,
	// Always for sidecars.
	KubeletPolicy rules.RestartPolicy
	// FromAnnotation reports that some of the rules came from the
	// restart-supervisor.dev/rules annotation.
	FromAnnotation bool
	// Limits are the supervisor's own limits on restarting in place
	// (restartBudget, handOverExitCodes, preRestartCheck, progress),
	// which only the annotation carries: a pod spec has no such fields.
	Limits rules.Limits
	// Backoff is the container's in-place back-off from the annotation
	// (its `backoff`), field by field over Options.Backoff.
	Backoff rules.Backoff
	// BudgetFrom names the owner's field Limits.RestartBudget came from
	// (ownerbudget.go); empty when the user set it, or none.
	BudgetFrom string
	// native are the KEP-5307 fields present on the container itself.
	nativePolicy, nativeRules bool
	// tool reports that the container mounts the supervisor's binary or
	// state volume itself: a tool of the pod (a `status` loop, say), which
	// is not wrapped only to follow pod restarts.
	tool bool
}

// PodRules reads and validates the restart rules of every init and regular
// container of pod like the newest release. specPath is the API path of the
// pod spec ("spec" for a Pod, "spec.template.spec" for a Deployment); object
// names the object in errors.
func PodRules(pod *corev1.Pod, specPath, object string) ([]ContainerRules, error) {
	return PodRulesFor(rules.NewestKube, pod, specPath, object)
}

// PodRulesFor is PodRules with the fields validated like the API server of
// release v: init containers with rules.KubeVersion.ValidateInit, the others
// with rules.KubeVersion.Validate.
func PodRulesFor(v rules.KubeVersion, pod *corev1.Pod, specPath, object string) ([]ContainerRules, error) {
	ann, err := parseRulesAnnotation(pod.Annotations)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", object, err)
	}
	return podRules(v, pod, ann, specPath, object)
}

// podRules is PodRulesFor with the annotation carrier already parsed; ann
// nil reads the container fields alone.
func podRules(v rules.KubeVersion, pod *corev1.Pod, ann map[string]carried, specPath, object string) ([]ContainerRules, error) {
	if err := checkEphemeral(pod, ann, specPath, object); err != nil {
		return nil, err
	}
	podPolicy := rules.RestartPolicy(pod.Spec.RestartPolicy)
	if podPolicy == "" {
		podPolicy = rules.Always
	}
	var out []ContainerRules
	seen := map[string]bool{}
	for _, group := range []struct {
		list []corev1.Container
		init bool
	}{{pod.Spec.InitContainers, true}, {pod.Spec.Containers, false}} {
		for i := range group.list {
			c := &group.list[i]
			seen[c.Name] = true
			cr, err := containerRules(v, c, i, group.init, podPolicy, ann, specPath, object)
			if err != nil {
				return nil, err
			}
			out = append(out, cr)
		}
	}
	for name := range ann {
		if !seen[name] {
			return nil, fmt.Errorf("%s: metadata.annotations[%s]: no container named %q in the pod", object, contract.AnnotationRules, name)
		}
	}
	return out, nil
}

// checkEphemeral refuses restart fields on the pod's ephemeral
// containers, in the fields or the annotation, as the API server does.
func checkEphemeral(pod *corev1.Pod, ann map[string]carried, specPath, object string) error {
	for i, c := range pod.Spec.EphemeralContainers {
		f := fmt.Sprintf("%s.ephemeralContainers[%d]", specPath, i)
		if c.RestartPolicy != nil {
			return fmt.Errorf("%s: %s.restartPolicy: Forbidden: cannot be set for an Ephemeral Container", object, f)
		}
		if len(c.RestartPolicyRules) > 0 {
			return fmt.Errorf("%s: %s.restartPolicyRules: Forbidden: cannot be set for an Ephemeral Container", object, f)
		}
		if _, ok := ann[c.Name]; ok {
			return fmt.Errorf("%s: metadata.annotations[%s]: container %q is an ephemeral container: restart rules cannot be set for an Ephemeral Container", object, contract.AnnotationRules, c.Name)
		}
	}
	return nil
}

// containerRules reads the restart fields of container c (the i-th of the
// init containers or of the containers): its fields merged with its entry
// of the annotation, its kind and the kubelet's policy for it, validated
// as the API server of release v would.
func containerRules(v rules.KubeVersion, c *corev1.Container, i int, init bool, podPolicy rules.RestartPolicy, ann map[string]carried, specPath, object string) (ContainerRules, error) {
	cr := ContainerRules{Name: c.Name, Index: i, Kind: KindRegular, KubeletPolicy: podPolicy}
	if init {
		cr.Field = fmt.Sprintf("%s.initContainers[%d]", specPath, i)
	} else {
		cr.Field = fmt.Sprintf("%s.containers[%d]", specPath, i)
	}
	for _, vm := range c.VolumeMounts {
		cr.tool = cr.tool || vm.Name == contract.BinVolume || vm.Name == contract.StateVolume
	}
	native := fromCore(c)
	cr.nativePolicy, cr.nativeRules = native.RestartPolicy != nil, len(native.RestartPolicyRules) > 0
	merged := native
	if a, ok := ann[c.Name]; ok {
		var err error
		cr.FromAnnotation = true
		if merged, err = merge(native, a.Container); err != nil {
			return cr, fmt.Errorf("%s: container %q: %v", object, c.Name, err)
		}
		if errs := a.Limits.Validate(""); len(errs) > 0 {
			return cr, fmt.Errorf("%s: metadata.annotations[%s]: container %q: %v", object, contract.AnnotationRules, c.Name, errs)
		}
		cr.Limits, cr.Backoff = a.Limits, a.Backoff
	}
	cr.Rules = merged
	if init {
		if err := cr.setInitKind(podPolicy, merged, object); err != nil {
			return cr, err
		}
	}
	if err := cr.validate(v, init, native, merged, object); err != nil {
		return cr, err
	}
	if init && merged.RestartPolicy == nil {
		// Only 1.34 lets such rules through (unchecked), and its
		// kubelet ignores rules without a container restartPolicy
		// (pkg/api/v1/pod/util.go:419-457@v1.34.4): so does the
		// supervisor.
		cr.Rules.RestartPolicyRules = nil
	}
	switch cr.Kind {
	case KindSidecar:
		cr.Ruled = len(cr.Rules.RestartPolicyRules) > 0
	default:
		cr.Ruled = cr.Rules.RestartPolicy != nil || len(cr.Rules.RestartPolicyRules) > 0
	}
	return cr, nil
}

// setInitKind makes cr, an init container, a sidecar when its own field
// says restartPolicy Always, and sets the kubelet's policy for it.
func (cr *ContainerRules) setInitKind(podPolicy rules.RestartPolicy, merged rules.Container, object string) error {
	cr.Kind = KindInit
	cr.KubeletPolicy = rules.OnFailure
	if podPolicy == rules.Never {
		cr.KubeletPolicy = rules.Never
	}
	if merged.RestartPolicy != nil && *merged.RestartPolicy == rules.Always {
		if !cr.nativePolicy {
			// Only the container field makes a sidecar: the
			// kubelet would run this one to completion.
			return fmt.Errorf("%s: container %q: restartPolicy Always on an init container makes it a sidecar; set it on the container itself, not in annotation %s",
				object, cr.Name, contract.AnnotationRules)
		}
		cr.Kind, cr.KubeletPolicy = KindSidecar, rules.Always
	}
	return nil
}

// validate checks cr's merged fields as the API server of release v
// would for its kind; RestartGroup only ever comes from the annotation.
func (cr *ContainerRules) validate(v rules.KubeVersion, init bool, native, merged rules.Container, object string) error {
	validate := v.Validate
	switch {
	case init:
		validate = v.ValidateInit
	case cr.FromAnnotation:
		// The annotation carrier may also say RestartGroup,
		// which the API fields never do.
		validate = v.ValidateCarried
	}
	for k, r := range native.RestartPolicyRules {
		if r.Action == rules.ActionRestartGroup {
			return fmt.Errorf("%s: %s.restartPolicyRules[%d].action: %s is restart-supervisor's own action, which the API server refuses: set it in annotation %s",
				object, cr.Field, k, rules.ActionRestartGroup, contract.AnnotationRules)
		}
	}
	if errs := validate(merged, cr.Field); len(errs) > 0 {
		return fmt.Errorf("%s: %v", object, errs)
	}
	return nil
}

// wrapped decides, for the mutation and for Explain alike, which
// containers run under the supervisor: those with restart fields the
// kubelet would not honour and, when a rule restarts all containers, every
// sidecar and regular container too, since the kubelet restarts each of
// them (KEP-5532) and only a supervisor can restart one in place. Regular
// init containers have finished before any supervisor could act on a pod
// restart and are left as they are (reruns adds a sidecar that runs them
// again), and so are containers without rules of their own that mount the
// supervisor's volumes themselves: tools of the pod, such as a loop running
// `restart-supervisor status`, which the wrapping's own mounts would
// collide with. The result is parallel to crs.
func wrapped(crs []ContainerRules) []bool {
	all := restartsAll(crs)
	out := make([]bool, len(crs))
	for k, cr := range crs {
		out[k] = cr.Ruled || (all && cr.Kind != KindInit && !cr.tool)
	}
	return out
}

// usesGroup reports whether one of the container's rules is RestartGroup.
func (cr ContainerRules) usesGroup() bool {
	for _, r := range cr.Rules.RestartPolicyRules {
		if r.Action == rules.ActionRestartGroup {
			return true
		}
	}
	_, group := cr.Limits.Escalation.PodWide()
	return group
}

// restartsAll reports whether any rule of the pod restarts all containers:
// RestartAllContainers, or RestartGroup, whose round restarts every
// container of each pod of the group as RestartAllContainers restarts the
// pod's (docs/gang.md).
func restartsAll(crs []ContainerRules) bool {
	for _, cr := range crs {
		for _, r := range cr.Rules.RestartPolicyRules {
			if r.Action == rules.ActionRestartAllContainers || r.Action == rules.ActionRestartGroup {
				return true
			}
		}
		if all, _ := cr.Limits.Escalation.PodWide(); all {
			return true
		}
	}
	return false
}

// reruns decides, for the mutation and for Explain alike, which regular
// init containers get a re-run sidecar: upstream a pod restart runs every
// init container again, in order, before the containers after it, and an
// init container has ended before any supervisor could act. The re-run
// sidecar, "<init container>-rerun" right after it, runs the init
// container's command again on each pod restart (contract.MemberInit).
//
// Only for a pod whose rules use RestartAllContainers, and for no tool
// container (see wrapped). A re-run sidecar declares no resources: it adds
// nothing to the pod's requests, but a container without limits makes a
// Guaranteed pod Burstable and removes the pod cgroup's cpu or memory
// limit (see limitsWouldChange). So re-run sidecars are added only when
// each of cpu and memory has a pod-level limit (pod-level resources then
// decide the QoS class too) or a container that already declares no limit
// of it; otherwise none is, with one warning. A name that is too long or
// taken skips that init container, with a warning. The result maps an
// index of crs to its re-run sidecar's name.
func reruns(pod *corev1.Pod, crs []ContainerRules, object string) (map[int]string, []string) {
	if !restartsAll(crs) {
		return nil, nil
	}
	var candidates []int
	for k, cr := range crs {
		if cr.Kind == KindInit && !cr.tool && cr.Name != contract.InstallContainer {
			candidates = append(candidates, k)
		}
	}
	if len(candidates) == 0 {
		return nil, nil
	}
	if why := limitsWouldChange(pod); why != "" {
		names := make([]string, len(candidates))
		for i, k := range candidates {
			names[i] = strconv.Quote(crs[k].Name)
		}
		which := "init container " + names[0] + " is"
		if len(names) > 1 {
			which = "init containers " + strings.Join(names, ", ") + " are"
		}
		return nil, []string{fmt.Sprintf("%s: %s not run again on a pod restart: a re-run sidecar would change the pod's QoS class or limits, since %s; see docs/pod-level.md",
			object, which, why)}
	}
	taken := map[string]bool{}
	for _, c := range pod.Spec.InitContainers {
		taken[c.Name] = true
	}
	for _, c := range pod.Spec.Containers {
		taken[c.Name] = true
	}
	for _, c := range pod.Spec.EphemeralContainers {
		taken[c.Name] = true
	}
	out := map[int]string{}
	var warnings []string
	for _, k := range candidates {
		cr := crs[k]
		name := cr.Name + contract.InitRerunSuffix
		switch {
		case len(name) > maxContainerName:
			warnings = append(warnings, fmt.Sprintf("%s: %s: init container %q is not run again on a pod restart: the name of its re-run sidecar, %q, is longer than %d characters",
				object, cr.Field, cr.Name, name, maxContainerName))
		case taken[name]:
			warnings = append(warnings, fmt.Sprintf("%s: %s: init container %q is not run again on a pod restart: the name of its re-run sidecar, %q, is taken by another container of the pod",
				object, cr.Field, cr.Name, name))
		default:
			out[k] = name
		}
	}
	return out, warnings
}

// limitsWouldChange says why a container without resources would change
// the pod's QoS class or its cgroup's limits ("" when it would not). The
// kubelet gives the pod cgroup a limit of cpu or memory when the pod-level
// resources set one or every container declares one (a zero limit counts
// as none), and a pod is Guaranteed only if its pod-level resources make it
// so or every container declares cpu and memory limits: so it would,
// unless each of cpu and memory has a pod-level limit or a container that
// declares none.
func limitsWouldChange(pod *corev1.Pod) string {
	var podLimits corev1.ResourceList
	if r := pod.Spec.Resources; r != nil {
		podLimits = r.Limits
	}
	cpu, memory := podLimits.Cpu().IsZero(), podLimits.Memory().IsZero()
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			cpu = cpu && !c.Resources.Limits.Cpu().IsZero()
			memory = memory && !c.Resources.Limits.Memory().IsZero()
		}
	}
	switch {
	case cpu && memory:
		return "every container declares cpu and memory limits"
	case cpu:
		return "every container declares a cpu limit"
	case memory:
		return "every container declares a memory limit"
	}
	return ""
}

// podMembers returns the value of contract.EnvPodMembers for a pod whose rules use
// RestartAllContainers, "" for any other: the wrapped sidecars and the
// re-run sidecars in spec.initContainers order, then the wrapped regular
// containers in spec order, which is the order the kubelet starts them in.
// wrap is wrapped(crs), rerun is reruns' result. A pod of more than
// contract.MaxPodMembers members is refused: the supervisor reads no
// longer list.
func podMembers(crs []ContainerRules, wrap []bool, rerun map[int]string, specPath, object string) (string, error) {
	if !restartsAll(crs) {
		return "", nil
	}
	n := len(rerun)
	for i, cr := range crs {
		if wrap[i] && (cr.Kind == KindSidecar || cr.Kind == KindRegular) {
			n++
		}
	}
	if n > contract.MaxPodMembers {
		return "", fmt.Errorf("%s: %s: %d containers take part in pod restarts (RestartAllContainers), at most %d may",
			object, specPath, n, contract.MaxPodMembers)
	}
	var members []contract.PodMember
	for i, cr := range crs {
		switch {
		case wrap[i] && cr.Kind == KindSidecar:
			members = append(members, contract.PodMember{Name: cr.Name, Kind: contract.MemberSidecar})
		case wrap[i] && cr.Kind == KindRegular:
			members = append(members, contract.PodMember{Name: cr.Name, Kind: contract.MemberRegular})
		}
		if name, ok := rerun[i]; ok {
			members = append(members, contract.PodMember{Name: name, Kind: contract.MemberInit})
		}
	}
	return contract.FormatPodMembers(members), nil
}

// supervised returns the rules the supervisor of cr applies: none of its
// own when the container is wrapped only to follow pod-level restarts.
func (cr ContainerRules) supervised() rules.Container {
	if !cr.Ruled {
		return rules.Container{}
	}
	return cr.Rules
}

// config is the supervisor's configuration for the container: the rules it
// applies, the policy the kubelet would apply, and for an init container
// that is not a sidecar the mark that its exit 0 means "initialized".
func (cr ContainerRules) config() rules.Config {
	cfg := rules.Config{Container: cr.supervised(), PodRestartPolicy: cr.KubeletPolicy, InitContainer: cr.Kind == KindInit}
	if cr.Ruled {
		cfg.Limits = cr.Limits
	}
	cfg.Backoff = cr.Backoff
	return cfg
}

// gatedFields reports which KEP-5307 fields the container itself carries
// that only a cluster with the ContainerRestartRules gate understands:
// restartPolicyRules on any container, and restartPolicy on any but a
// sidecar, whose restartPolicy Always every supported cluster knows.
func (cr ContainerRules) gatedFields() (restartRules, restartPolicy bool) {
	return cr.nativeRules, cr.nativePolicy && cr.Kind != KindSidecar
}

const (
	annContainers annShape = iota // map from container name to annContainer
	annContainer
	annRules // list of annRule
	annRule
	annExitCodes
	annValues // list of scalars
	annScalar
	annBudget
	annCheck
	annArgs // list of scalars, a command's
	annProgress
	annBackoff
	annWatchdog
	annEscalation
	annSteps // list of annStep
	annStep
)

// merge combines the two carriers. A field may come from either; when both
// set it they must agree.
func merge(native, ann rules.Container) (rules.Container, error) {
	out := native
	if ann.RestartPolicy != nil {
		if native.RestartPolicy != nil && *native.RestartPolicy != *ann.RestartPolicy {
			return out, fmt.Errorf("restartPolicy %q in the container disagrees with %q in annotation %s",
				*native.RestartPolicy, *ann.RestartPolicy, contract.AnnotationRules)
		}
		out.RestartPolicy = ann.RestartPolicy
	}
	if len(ann.RestartPolicyRules) > 0 {
		if len(native.RestartPolicyRules) > 0 && !equalRules(native.RestartPolicyRules, ann.RestartPolicyRules) {
			return out, fmt.Errorf("restartPolicyRules in the container disagree with those in annotation %s", contract.AnnotationRules)
		}
		out.RestartPolicyRules = ann.RestartPolicyRules
	}
	return out, nil
}

func equalRules(a, b []rules.Rule) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Action != b[i].Action || (a[i].ExitCodes == nil) != (b[i].ExitCodes == nil) {
			return false
		}
		if a[i].ExitCodes == nil {
			continue
		}
		ea, eb := a[i].ExitCodes, b[i].ExitCodes
		if ea.Operator != eb.Operator || len(ea.Values) != len(eb.Values) {
			return false
		}
		for j := range ea.Values {
			if ea.Values[j] != eb.Values[j] {
				return false
			}
		}
	}
	return true
}

func fromCore(c *corev1.Container) rules.Container {
	var out rules.Container
	if c.RestartPolicy != nil {
		out.RestartPolicy = rules.PolicyPtr(rules.RestartPolicy(*c.RestartPolicy))
	}
	for _, r := range c.RestartPolicyRules {
		rr := rules.Rule{Action: rules.Action(r.Action)}
		if r.ExitCodes != nil {
			rr.ExitCodes = &rules.ExitCodes{Operator: rules.Operator(r.ExitCodes.Operator), Values: append([]int32(nil), r.ExitCodes.Values...)}
		}
		out.RestartPolicyRules = append(out.RestartPolicyRules, rr)
	}
	return out
}

// clip shortens a value quoted from the annotation for an error message.
func clip(s string) string { return oneline.Clip(s, 64) }
