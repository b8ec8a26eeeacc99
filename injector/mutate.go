package injector

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/imagelookup"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// Status is the value of the restart-supervisor.dev/status annotation.
type Status struct {
	Version    string   `json:"version"`
	Containers []string `json:"containers"`
	// Delivery is how the binaries reach the pod; absent for DeliveryCopy
	// (what every injection before it was).
	Delivery string `json:"delivery,omitempty"`
}

// MutatePod wraps the containers of pod that carry restart rules and
// returns the patch with Result.Pod, the patch applied to a copy of pod.
// pod is not modified. A pod without rules, or one already injected, yields
// no patch and Injected=false.
func (i *Injector) MutatePod(ctx context.Context, pod *corev1.Pod) (*Result, error) {
	res, err := i.PodPatch(ctx, pod)
	if err != nil {
		return nil, err
	}
	if res.Pod, err = patchedPod(pod, res.Patch); err != nil {
		return nil, fmt.Errorf("%s: applying the injection patch: %v", podObjectName(pod), err)
	}
	return res, nil
}

// PodPatch is the mutation: the patch that wraps the containers of pod
// that carry restart rules, without Result.Pod. The admission webhook sends
// the patch on as it is. pod is not modified.
func (i *Injector) PodPatch(ctx context.Context, pod *corev1.Pod) (*Result, error) {
	return i.mutate(ctx, pod, pod.Namespace, "spec", podObjectName(pod), nil)
}

func podObjectName(pod *corev1.Pod) string {
	return ObjectName("pod", pod.Namespace, pod.Name, pod.GenerateName)
}

func ObjectName(kind, ns, name, generateName string) string {
	if name == "" && generateName != "" {
		name = generateName + "*"
	}
	if ns != "" {
		name = ns + "/" + name
	}
	return fmt.Sprintf("%s %q", kind, name)
}

// mutation is one run of mutate: the input it reads and the patch it
// writes. The input is never modified; every edit is an operation in p.
type mutation struct {
	*Injector
	ctx context.Context
	pod *corev1.Pod // the input
	// namespace is where pull secrets are read: a pod template has none
	// of its own and uses its workload's.
	namespace string
	object    string // names the input in messages
	p         patchBuilder
	res       *Result
	// initShift is how far the injection moves the pod's init
	// containers: 1 past the install container of DeliveryCopy, 0 for
	// DeliveryImage.
	initShift int
	// imageCommands counts the bytes of the commands taken from images
	// (MaxImageCommandsBytes).
	imageCommands int
	// members: the pod has a RestartAllContainers rule, and its member
	// list goes into AnnotationPodMembers, which every member's
	// contract.EnvPodMembers reads.
	members bool
	// addReadiness: a wrapped container without a readiness probe of its
	// own gets one (readinessRule).
	addReadiness bool
}

// mutate computes the injection of in as a patch relative to its root.
func (i *Injector) mutate(ctx context.Context, in *corev1.Pod, namespace, specPath, object string, budget *ownerBudget) (*Result, error) {
	res := &Result{}
	crs, err := PodRulesFor(i.kubeVersion(), in, specPath, object)
	if err != nil {
		return nil, err
	}
	applyOwnerBudget(crs, budget)
	if raw, ok := in.Annotations[contract.AnnotationStatus]; ok {
		if err := checkBinMounts(in, specPath, object, true); err != nil {
			return nil, err
		}
		return res, alreadyInjected(res, raw, crs, object)
	}
	wrap := wrapped(crs)
	if !slices.Contains(wrap, true) {
		return res, nil
	}
	if field := windowsOnly(&in.Spec); field != "" {
		return nil, fmt.Errorf("%s: %s.%s: restart-supervisor runs Linux containers only", object, specPath, field)
	}
	if err := checkConflicts(in, specPath, object); err != nil {
		return nil, err
	}

	rerun, warnings := reruns(in, crs, object)
	res.Warnings = append(res.Warnings, warnings...)
	members, err := podMembers(crs, wrap, rerun, specPath, object)
	if err != nil {
		return nil, err
	}
	addReadiness, err := readinessRule(in, specPath, object)
	if err != nil {
		return nil, err
	}
	m := &mutation{Injector: i, ctx: ctx, pod: in, namespace: namespace, object: object, res: res, members: members != "", addReadiness: addReadiness}
	status := Status{Version: contract.Version}
	// Pod-level additions first: the container edits below address
	// initContainers by their index after the install container went in
	// (none goes in for DeliveryImage).
	m.addDelivery(&status)
	if err := m.wrapContainers(crs, wrap, rerun, &status); err != nil {
		return nil, err
	}
	res.Warnings = uniqueStrings(res.Warnings)
	annotations := [][2]string{}
	if members != "" {
		annotations = append(annotations, [2]string{contract.AnnotationPodMembers, members})
	}
	if limit := groupLimit(in, crs, budget); limit != "" {
		// The owner's limit, read by the node agent (docs/gang.md).
		annotations = append(annotations, [2]string{contract.AnnotationGroupMaxRestarts, limit})
	}
	res.Patch, res.Injected, res.Containers = m.annotatedPatch(status, annotations), true, status.Containers
	return res, nil
}

// addDelivery adds what brings the binaries to the pod (the volumes, and
// for DeliveryCopy the install container first among the init
// containers) and the pull secrets the pod lacks.
func (m *mutation) addDelivery(status *Status) {
	in := m.pod
	delivery := m.delivery()
	addToArray(&m.p, "/spec/volumes", len(in.Spec.Volumes), m.volumes(delivery)...)
	if delivery == DeliveryCopy {
		install := withoutEmptyResources(m.installContainer(in))
		if len(in.Spec.InitContainers) == 0 {
			m.p.add("/spec/initContainers", []any{install})
		} else {
			m.p.add("/spec/initContainers/0", install)
		}
		m.initShift = 1
	}
	if secrets := missingPullSecrets(in, m.opts.PullSecrets); len(secrets) > 0 {
		addToArray(&m.p, "/spec/imagePullSecrets", len(in.Spec.ImagePullSecrets), secrets...)
	}
	if delivery != DeliveryCopy {
		status.Delivery = string(delivery)
	}
}

// wrapContainers wraps each container wrap marks and adds the re-run
// sidecars of rerun, naming each in status.
func (m *mutation) wrapContainers(crs []ContainerRules, wrap []bool, rerun map[int]string, status *Status) error {
	for k, cr := range crs {
		if wrap[k] {
			if err := m.wrap(cr); err != nil {
				return err
			}
			status.Containers = append(status.Containers, cr.Name)
		}
		if name, ok := rerun[k]; ok {
			status.Containers = append(status.Containers, name)
		}
	}
	// The re-run sidecars go in last, each right after its init container,
	// so that the edits above keep their indexes: init container k is at
	// k+initShift after the install container, and each re-run sidecar
	// inserted before it moves it one further.
	inserted := 0
	for k, cr := range crs {
		name, ok := rerun[k]
		if !ok {
			continue
		}
		if err := m.addRerun(cr, name, cr.Index+m.initShift+1+inserted); err != nil {
			return err
		}
		inserted++
	}
	return nil
}

// annotatedPatch is the mutation's patch with the status annotation and
// extra set on the pod, the annotation ops first so that a reader of the
// patch sees what it is about (order does not matter for correctness
// here).
func (m *mutation) annotatedPatch(status Status, extra [][2]string) []PatchOp {
	st, _ := json.Marshal(status)
	annotations := append([][2]string{{contract.AnnotationStatus, string(st)}}, extra...)
	body := len(m.p.ops)
	m.p.setAnnotations(&m.pod.ObjectMeta, annotations...)
	return append(m.p.ops[body:len(m.p.ops):len(m.p.ops)], m.p.ops[:body]...)
}

// wrap records the edits that run container cr under the supervisor.
func (m *mutation) wrap(cr ContainerRules) error {
	var c *corev1.Container
	var base string
	if cr.Kind == KindRegular {
		c = &m.pod.Spec.Containers[cr.Index]
		base = "/spec/containers/" + strconv.Itoa(cr.Index)
	} else {
		c = &m.pod.Spec.InitContainers[cr.Index]
		// The install container, if any, went in at index 0.
		base = "/spec/initContainers/" + strconv.Itoa(cr.Index+m.initShift)
	}
	s, err := m.supervision(cr, c, c.Name, cr.Kind != KindInit)
	if err != nil {
		return err
	}

	// The supervisor applies these fields now: a cluster without the
	// ContainerRestartRules gate refuses or drops them, and one with it
	// would act on them a second time.
	dropRules, dropPolicy := cr.gatedFields()
	if dropRules {
		m.p.remove(base + "/restartPolicyRules")
	}
	if dropPolicy {
		m.p.remove(base + "/restartPolicy")
	}
	// The supervisor runs these now (wrappedProbes); the kubelet learns of
	// the start from restart-probe.
	// A probe taken away is set to null, and a probe replaced names the
	// fields of the one it replaces that it does not set, as null:
	// `kubectl apply` of the injected object over a live one merges
	// (strategic merge patch), and deletes only what the last applied
	// configuration had, or what the new one sets to null. Without them
	// the live httpGet stayed beside the injected exec, which the API
	// server refuses (may not specify more than 1 handler type), and the
	// live liveness probe stayed with the kubelet.
	if s.liveness {
		m.p.add(base+"/livenessProbe", jsonNull)
	}
	if s.startup {
		m.p.add(base+"/startupProbe", replacing(kubeletStartup(), c.StartupProbe))
	}
	if s.readiness != nil {
		m.p.add(base+"/readinessProbe", replacing(s.readiness, c.ReadinessProbe))
	}
	if cr.Kind != KindInit {
		hook, err := prestopHook(c)
		if err != nil {
			return fmt.Errorf("%s: container %q: %v", m.object, c.Name, err)
		}
		m.p.add(base+"/lifecycle", withPrestop(c, hook))
	}
	m.p.add(base+"/command", s.cmd)
	addToArray(&m.p, base+"/env", len(c.Env), s.env...)
	addToArray(&m.p, base+"/volumeMounts", len(c.VolumeMounts), s.mounts...)
	return nil
}

// addRerun records the insertion, at index at of spec.initContainers, of
// the re-run sidecar named name of the regular init container cr (see
// reruns): a native sidecar with the init container's image, command and
// mounts, wrapped as the init container itself would be, with its
// configuration, and a pod member. It declares no resources, so it changes
// neither the pod's requests nor, where reruns adds it, its QoS class and
// limits; no probes, since it idles between re-runs and must count as
// started and ready; and no lifecycle.
func (m *mutation) addRerun(cr ContainerRules, name string, at int) error {
	c := &m.pod.Spec.InitContainers[cr.Index]
	s, err := m.supervision(cr, c, name, true)
	if err != nil {
		return err
	}
	rc := corev1.Container{
		Name:            name,
		Image:           c.Image,
		ImagePullPolicy: c.ImagePullPolicy,
		Command:         s.cmd,
		Args:            c.Args,
		WorkingDir:      c.WorkingDir,
		EnvFrom:         c.EnvFrom,
		Env:             append(slices.Clip(c.Env), s.env...),
		VolumeMounts:    append(slices.Clip(c.VolumeMounts), s.mounts...),
		VolumeDevices:   c.VolumeDevices,
		SecurityContext: c.SecurityContext,
		// The supervisor's --termination-message-path follows the init
		// container's path; the kubelet reads the message there.
		TerminationMessagePath:   c.TerminationMessagePath,
		TerminationMessagePolicy: c.TerminationMessagePolicy,
		Stdin:                    c.Stdin,
		StdinOnce:                c.StdinOnce,
		TTY:                      c.TTY,
		RestartPolicy:            ptr.To(corev1.ContainerRestartPolicyAlways),
	}
	m.p.add("/spec/initContainers/"+strconv.Itoa(at), withoutEmptyResources(rc))
	return nil
}

// wrapping is what wrapping adds to a container: its command, the
// supervisor's environment and mounts, and the probes the kubelet keeps.
type wrapping struct {
	cmd    []string
	env    []corev1.EnvVar
	mounts []corev1.VolumeMount
	// liveness and startup report that the supervisor runs the
	// container's own probe of that kind; readiness replaces the
	// container's readiness probe when not nil.
	liveness, startup bool
	readiness         *corev1.Probe
}

// supervision works out what running container c of cr under the
// supervisor as container name takes. member gives it contract.EnvPodMembers.
func (m *mutation) supervision(cr ContainerRules, c *corev1.Container, name string, member bool) (wrapping, error) {
	var s wrapping
	l, err := m.launchOf(cr, c)
	if err != nil {
		return s, err
	}
	s.cmd = append(supervisorFlags(c), l.argv...)
	cfg, err := m.supervisedConfig(cr, c, &s)
	if err != nil {
		return s, err
	}
	cfgJSON, err := cfg.Marshal()
	if err != nil {
		return s, fmt.Errorf("%s: container %q: %v", m.object, c.Name, err)
	}
	s.env = m.supervisorEnv(c, l, name, member, cfgJSON)
	s.mounts = []corev1.VolumeMount{
		{Name: contract.BinVolume, MountPath: contract.BinDir, ReadOnly: true},
		{Name: contract.StateVolume, MountPath: contract.StateDir},
	}
	return s, nil
}

// launchOf is the command container c of cr runs, its image's commands
// counted against MaxImageCommandsBytes; c must not mount over the
// supervisor's directories.
func (m *mutation) launchOf(cr ContainerRules, c *corev1.Container) (launch, error) {
	l, err := m.entrypoint(c)
	if err != nil {
		return l, err
	}
	// What the image lookups add is counted as it is added: one image's
	// commands are capped, but every container of it gets a copy.
	if !l.fromPod {
		_, size := imagelookup.ArgvSize(l.argv)
		if m.imageCommands += size + len(l.platforms); m.imageCommands > MaxImageCommandsBytes {
			return l, fmt.Errorf("%s: container %q: the commands taken from the images of the pod's containers pass %d bytes; set command on some of them",
				m.object, c.Name, MaxImageCommandsBytes)
		}
	}
	m.res.Warnings = append(m.res.Warnings, l.warnings...)
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == contract.BinDir || vm.MountPath == contract.StateDir {
			return l, fmt.Errorf("%s: %s.volumeMounts: mount path %s is reserved for restart-supervisor", m.object, cr.Field, vm.MountPath)
		}
	}
	return l, nil
}

// supervisorFlags is the supervisor's command line up to "--": the
// container's termination message settings, which the supervisor then
// writes as the kubelet would.
func supervisorFlags(c *corev1.Container) []string {
	cmd := []string{contract.SupervisorPath}
	if c.TerminationMessagePath != "" && c.TerminationMessagePath != contract.DefaultTerminationMessagePath {
		cmd = append(cmd, "--termination-message-path", c.TerminationMessagePath)
	}
	if c.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
		cmd = append(cmd, "--termination-message-policy", string(corev1.TerminationMessageFallbackToLogsOnError))
	}
	return append(cmd, "--")
}

// supervisedConfig is the supervisor's config for container c of cr: its
// rules, the default back-off, and the probes the supervisor runs (s
// records which, and the readiness probe that replaces the container's).
func (m *mutation) supervisedConfig(cr ContainerRules, c *corev1.Container, s *wrapping) (rules.Config, error) {
	cfg := cr.config()
	if cfg.Backoff.Initial == nil {
		cfg.Backoff.Initial = m.opts.Backoff.Initial
	}
	if cfg.Backoff.Max == nil {
		cfg.Backoff.Max = m.opts.Backoff.Max
	}
	if cr.Kind != KindInit {
		// An init container that is not a sidecar has no probes.
		var err error
		if cfg.Probes, err = wrappedProbes(m.object, c, m.pod.Spec.TerminationGracePeriodSeconds); err != nil {
			return cfg, err
		}
		var moved *rules.Probe
		if c.ReadinessProbe != nil || m.addReadiness {
			if s.readiness, moved, err = readinessFor(c); err != nil {
				return cfg, fmt.Errorf("%s: container %q: readinessProbe: %v", m.object, c.Name, err)
			}
		}
		if moved != nil {
			if cfg.Probes == nil {
				cfg.Probes = &rules.Probes{}
			}
			cfg.Probes.Readiness = moved
		}
	}
	if err := cfg.Probes.Validate(); err != nil {
		return cfg, fmt.Errorf("%s: container %q: %v", m.object, c.Name, err)
	}
	s.liveness = cfg.Probes != nil && cfg.Probes.Liveness != nil
	s.startup = cfg.Probes != nil && cfg.Probes.Startup != nil
	return cfg, nil
}

// supervisorEnv is the environment the supervisor of container c, as
// container name, reads: its state directory and name, its config, the
// image's per-platform commands, the pod's members, the stop signal and
// the grace period where it is not PID 1.
func (m *mutation) supervisorEnv(c *corev1.Container, l launch, name string, member bool, cfgJSON []byte) []corev1.EnvVar {
	env := []corev1.EnvVar{
		{Name: contract.EnvStateDir, Value: contract.StateDir},
		{Name: contract.EnvContainerName, Value: name},
		{Name: contract.EnvConfig, Value: escapeExpansion(string(cfgJSON))},
	}
	if l.platforms != "" {
		env = append(env, corev1.EnvVar{Name: contract.EnvPlatformCommands, Value: l.platforms})
	}
	if m.members && member {
		// One fieldRef per container, not the list itself: the list
		// repeated in each of N containers made the patch grow with N².
		env = append(env, corev1.EnvVar{Name: contract.EnvPodMembers, ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: contract.PodMembersFieldPath}}})
	}
	if sig, ok := stopSignal(c, l); ok {
		// The runtime stops the container with this signal instead of
		// SIGTERM: the supervisor must take it as a stop, not forward it
		// and then judge the workload's exit by the rules.
		env = append(env, corev1.EnvVar{Name: contract.EnvStopSignals, Value: "SIGTERM,SIGINT," + sig})
	}
	if sp := m.pod.Spec.ShareProcessNamespace; sp != nil && *sp {
		// Not PID 1: the workload would outlive a supervisor killed by
		// the runtime, so the supervisor kills it when the runtime would.
		grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
		if g := m.pod.Spec.TerminationGracePeriodSeconds; g != nil {
			grace = *g
		}
		env = append(env, corev1.EnvVar{Name: contract.EnvGracePeriod, Value: strconv.FormatInt(grace, 10) + "s"})
	}
	return env
}

// uniqueStrings drops repeats from list, keeping the first of each: a
// container and its re-run sidecar share the warnings of their image.
func uniqueStrings(list []string) []string {
	seen := map[string]bool{}
	out := list[:0]
	for _, s := range list {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
