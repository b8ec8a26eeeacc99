package injector

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/imagelookup"
	"github.com/restart-supervisor/restart-supervisor/internal/yamledit"
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

// patchedPod is pod with ops applied, a new object that shares nothing with
// pod. The patch is the mutation's only record of its edits, so the mutated
// pod is derived from it rather than edited alongside.
func patchedPod(pod *corev1.Pod, ops []PatchOp) (*corev1.Pod, error) {
	if len(ops) == 0 {
		return pod.DeepCopy(), nil
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	if raw, err = ApplyPatchJSON(raw, ops); err != nil {
		return nil, err
	}
	out := &corev1.Pod{}
	if err := json.Unmarshal(raw, out); err != nil {
		return nil, err
	}
	return out, nil
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

// readinessRule says whether the wrapped containers of pod that have no
// readiness probe get `restart-probe ready` as one. It answers not ready
// while the supervisor runs no workload, as a container whose process has
// exited is natively; that matters where readiness is read: a Service's
// endpoints (which select by labels), a Deployment's or StatefulSet's
// rollout, a PodDisruptionBudget. Whether a Service selects the pod cannot
// be known from the pod, so the rule is: the pod restarts always (what
// Deployments, StatefulSets, DaemonSets and ReplicaSets require) and has
// labels. Batch pods (Jobs, training replicas: OnFailure or Never) and pods
// without labels get none, and save an exec every 2 s per container.
// AnnotationReadiness on the pod overrides the rule.
func readinessRule(pod *corev1.Pod, specPath, object string) (bool, error) {
	switch v, set := pod.Annotations[contract.AnnotationReadiness]; {
	case !set:
	case v == contract.ReadinessOn:
		return true, nil
	case v == contract.ReadinessOff:
		return false, nil
	default:
		meta := "metadata"
		if specPath != "spec" {
			meta = strings.TrimSuffix(specPath, ".spec") + ".metadata"
		}
		return false, fmt.Errorf(`%s: %s.annotations[%s]: Unsupported value: %q: supported values: %q, %q`,
			object, meta, contract.AnnotationReadiness, clip(v), contract.ReadinessOn, contract.ReadinessOff)
	}
	always := pod.Spec.RestartPolicy == "" || pod.Spec.RestartPolicy == corev1.RestartPolicyAlways
	return always && len(pod.Labels) > 0, nil
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
	delivery := i.delivery()
	addToArray(&m.p, "/spec/volumes", len(in.Spec.Volumes), i.volumes(delivery)...)
	if delivery == DeliveryCopy {
		install := withoutEmptyResources(i.installContainer(in))
		if len(in.Spec.InitContainers) == 0 {
			m.p.add("/spec/initContainers", []any{install})
		} else {
			m.p.add("/spec/initContainers/0", install)
		}
		m.initShift = 1
	}
	if secrets := missingPullSecrets(in, i.opts.PullSecrets); len(secrets) > 0 {
		addToArray(&m.p, "/spec/imagePullSecrets", len(in.Spec.ImagePullSecrets), secrets...)
	}
	if delivery != DeliveryCopy {
		status.Delivery = string(delivery)
	}

	for k, cr := range crs {
		if wrap[k] {
			if err := m.wrap(cr); err != nil {
				return nil, err
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
			return nil, err
		}
		inserted++
	}
	res.Warnings = uniqueStrings(res.Warnings)

	st, _ := json.Marshal(status)
	annotations := [][2]string{{contract.AnnotationStatus, string(st)}}
	if members != "" {
		annotations = append(annotations, [2]string{contract.AnnotationPodMembers, members})
	}
	if limit := groupLimit(in, crs, budget); limit != "" {
		// The owner's limit, read by the node agent (docs/gang.md).
		annotations = append(annotations, [2]string{contract.AnnotationGroupMaxRestarts, limit})
	}
	body := len(m.p.ops)
	m.p.setAnnotations(&in.ObjectMeta, annotations...)
	// The annotation ops go first so that a reader of the patch sees what
	// it is about; order does not matter for correctness here.
	ops := append(m.p.ops[body:len(m.p.ops):len(m.p.ops)], m.p.ops[:body]...)

	res.Patch, res.Injected, res.Containers = ops, true, status.Containers
	return res, nil
}

// alreadyInjected keeps an injected pod as it is, but refuses rules that
// were added to a container after the injection, since they would be
// silently ignored.
func alreadyInjected(res *Result, raw string, crs []ContainerRules, object string) error {
	var st Status
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		return fmt.Errorf("%s: metadata.annotations[%s]: invalid: %v", object, contract.AnnotationStatus, err)
	}
	wrapped := map[string]bool{}
	for _, n := range st.Containers {
		wrapped[n] = true
	}
	for _, cr := range crs {
		if wrapped[cr.Name] {
			continue
		}
		if r, p := cr.gatedFields(); r || p {
			return fmt.Errorf("%s: %s: container %q carries restart rules but the pod was injected without it (annotation %s); inject the original manifest again",
				object, cr.Field, cr.Name, contract.AnnotationStatus)
		}
	}
	res.Containers = st.Containers
	if st.Version != contract.Version {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s was injected by restart-injector %s; left unchanged", object, st.Version))
	}
	return nil
}

func checkConflicts(pod *corev1.Pod, specPath, object string) error {
	for i, v := range pod.Spec.Volumes {
		if v.Name == contract.BinVolume || v.Name == contract.StateVolume {
			return fmt.Errorf("%s: %s.volumes[%d].name: %q is reserved for restart-supervisor", object, specPath, i, v.Name)
		}
	}
	for i, c := range pod.Spec.InitContainers {
		if c.Name == contract.InstallContainer {
			return fmt.Errorf("%s: %s.initContainers[%d].name: %q is reserved for restart-supervisor", object, specPath, i, c.Name)
		}
	}
	for i, c := range pod.Spec.Containers {
		if c.Name == contract.InstallContainer {
			return fmt.Errorf("%s: %s.containers[%d].name: %q is reserved for restart-supervisor", object, specPath, i, c.Name)
		}
	}
	return checkBinMounts(pod, specPath, object, false)
}

// checkBinMounts refuses a container that mounts the binary volume
// read-write: it could replace the supervisor that every wrapped container
// runs as PID 1. A manifest can name the volume in a mount without
// declaring it (the injector adds it), in any container: regular, init,
// sidecar or ephemeral. Only the install container, in a pod injected
// already, writes there. Refused rather than made read-only, so that a
// container that meant to write there fails at admission with its name,
// not at run time with EROFS.
func checkBinMounts(pod *corev1.Pod, specPath, object string, injected bool) error {
	check := func(field string, i int, name string, mounts []corev1.VolumeMount) error {
		for j, vm := range mounts {
			if vm.Name == contract.BinVolume && !vm.ReadOnly {
				return fmt.Errorf("%s: %s.%s[%d].volumeMounts[%d]: container %q mounts %s read-write; it holds the supervisor binary of the wrapped containers: set readOnly: true",
					object, specPath, field, i, j, name, contract.BinVolume)
			}
		}
		return nil
	}
	for i, c := range pod.Spec.InitContainers {
		if injected && c.Name == contract.InstallContainer {
			continue
		}
		if err := check("initContainers", i, c.Name, c.VolumeMounts); err != nil {
			return err
		}
	}
	for i, c := range pod.Spec.Containers {
		if err := check("containers", i, c.Name, c.VolumeMounts); err != nil {
			return err
		}
	}
	for i, c := range pod.Spec.EphemeralContainers {
		if err := check("ephemeralContainers", i, c.Name, c.VolumeMounts); err != nil {
			return err
		}
	}
	return nil
}

// volumes are the binary volume of delivery d and the state volume. The
// image volume needs no size limit: the kubelet mounts the image's own
// layers, read-only (spec.volumes[].image, k8s.io/api core/v1 types.go,
// v0.37.2: "The volume will be mounted read-only (ro)").
func (i *Injector) volumes(d Delivery) []corev1.Volume {
	bin := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: i.opts.VolumeMedium, SizeLimit: i.opts.BinSizeLimit}}
	if d == DeliveryImage {
		bin = corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: i.opts.SupervisorImage, PullPolicy: i.opts.ImagePullPolicy}}
	}
	return []corev1.Volume{
		{Name: contract.BinVolume, VolumeSource: bin},
		{Name: contract.StateVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: i.opts.VolumeMedium, SizeLimit: i.opts.StateSizeLimit}}},
	}
}

// missingPullSecrets are the references of names that pod does not list
// in imagePullSecrets, in the order given.
func missingPullSecrets(pod *corev1.Pod, names []string) []corev1.LocalObjectReference {
	var add []corev1.LocalObjectReference
	for _, n := range names {
		if n == "" || slices.ContainsFunc(pod.Spec.ImagePullSecrets, func(r corev1.LocalObjectReference) bool { return r.Name == n }) ||
			slices.ContainsFunc(add, func(r corev1.LocalObjectReference) bool { return r.Name == n }) {
			continue
		}
		add = append(add, corev1.LocalObjectReference{Name: n})
	}
	return add
}

func (i *Injector) installContainer(pod *corev1.Pod) corev1.Container {
	c := corev1.Container{
		Name:            contract.InstallContainer,
		Image:           i.opts.SupervisorImage,
		ImagePullPolicy: i.opts.ImagePullPolicy,
		Command:         []string{contract.ImageBinaryPath, "install", contract.BinDir},
		VolumeMounts:    []corev1.VolumeMount{{Name: contract.BinVolume, MountPath: contract.BinDir}},
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To[int64](65532),
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	if !isBestEffort(pod) {
		c.Resources = i.installResources(pod)
	}
	return c
}

// installResources are the requests and limits of the install container of
// a pod that is not BestEffort: Options.InitResources when set; else the
// CPU and memory requests and limits of the pod's regular container with
// the most CPU (its limit, else its request; then memory likewise; the
// first on a tie). Also under pod-level resources (spec.resources): a pod
// with pod-level requests only has its cgroup limited by its containers'
// limits when every container declares one, and the copy keeps that true.
//
// Why a copy of a container's own: init containers run before the regular
// ones, so the pod's effective request and limit of a resource are the
// larger of the regular containers' sum and any one init container's
// (k8s.io/component-helpers resource.PodRequests, v0.37.2): one regular
// container's figures never raise them. A Guaranteed pod has requests
// equal to limits in that container, so it stays Guaranteed; a Burstable
// one stays Burstable. The container passed the namespace's LimitRange
// (min, max, maxLimitRequestRatio), so the copy does too. And the copy
// gets the CPU quota the workload was given rather than a token one: under
// a 10m limit (CFS quota 1 ms per 100 ms period) the copy of 17 MB took
// 0.8 to 1.3 s instead of 10 to 21 ms.
func (i *Injector) installResources(pod *corev1.Pod) corev1.ResourceRequirements {
	if i.opts.InitResources != nil {
		return *i.opts.InitResources.DeepCopy()
	}
	amount := func(c *corev1.Container, name corev1.ResourceName) resource.Quantity {
		if q, ok := c.Resources.Limits[name]; ok {
			return q
		}
		return c.Resources.Requests[name]
	}
	best := -1
	for k := range pod.Spec.Containers {
		if best < 0 {
			best = k
			continue
		}
		c, b := &pod.Spec.Containers[k], &pod.Spec.Containers[best]
		cpu, bcpu := amount(c, corev1.ResourceCPU), amount(b, corev1.ResourceCPU)
		mem, bmem := amount(c, corev1.ResourceMemory), amount(b, corev1.ResourceMemory)
		if d := cpu.Cmp(bcpu); d > 0 || d == 0 && mem.Cmp(bmem) > 0 {
			best = k
		}
	}
	var r corev1.ResourceRequirements
	if best < 0 {
		return r
	}
	from := pod.Spec.Containers[best].Resources
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := from.Requests[name]; ok {
			if r.Requests == nil {
				r.Requests = corev1.ResourceList{}
			}
			r.Requests[name] = q.DeepCopy()
		}
		if q, ok := from.Limits[name]; ok {
			if r.Limits == nil {
				r.Limits = corev1.ResourceList{}
			}
			r.Limits[name] = q.DeepCopy()
		}
	}
	return r
}

// withoutEmptyResources renders c for a patch, leaving out the
// "resources": {} that encoding/json writes for a container without any
// (the field's omitempty does not apply to a struct), and keeping the
// fields in the struct's order. Unescaped quotes occur in encoding/json's
// output only around keys and string values, so the sequence can only be
// the container's own resources key.
func withoutEmptyResources(c corev1.Container) any {
	if len(c.Resources.Requests) > 0 || len(c.Resources.Limits) > 0 || len(c.Resources.Claims) > 0 {
		return c
	}
	b, _ := json.Marshal(c)
	b = bytes.Replace(b, []byte(`"resources":{},`), nil, 1)
	b = bytes.Replace(b, []byte(`,"resources":{}`), nil, 1)
	return json.RawMessage(b)
}

// isBestEffort applies the kubelet's QoS rule: no container (init or
// regular) and no pod-level resources request or limit CPU or memory.
func isBestEffort(pod *corev1.Pod) bool {
	if r := pod.Spec.Resources; r != nil && (len(r.Requests) > 0 || len(r.Limits) > 0) {
		return false
	}
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			for _, rl := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
				for name, q := range rl {
					if (name == corev1.ResourceCPU || name == corev1.ResourceMemory) && !q.IsZero() {
						return false
					}
				}
			}
		}
	}
	return true
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
	l, err := m.entrypoint(c)
	if err != nil {
		return s, err
	}
	// What the image lookups add is counted as it is added: one image's
	// commands are capped, but every container of it gets a copy.
	if !l.fromPod {
		_, size := imagelookup.ArgvSize(l.argv)
		if m.imageCommands += size + len(l.platforms); m.imageCommands > MaxImageCommandsBytes {
			return s, fmt.Errorf("%s: container %q: the commands taken from the images of the pod's containers pass %d bytes; set command on some of them",
				m.object, c.Name, MaxImageCommandsBytes)
		}
	}
	m.res.Warnings = append(m.res.Warnings, l.warnings...)
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == contract.BinDir || vm.MountPath == contract.StateDir {
			return s, fmt.Errorf("%s: %s.volumeMounts: mount path %s is reserved for restart-supervisor", m.object, cr.Field, vm.MountPath)
		}
	}

	cmd := []string{contract.SupervisorPath}
	if c.TerminationMessagePath != "" && c.TerminationMessagePath != contract.DefaultTerminationMessagePath {
		cmd = append(cmd, "--termination-message-path", c.TerminationMessagePath)
	}
	if c.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
		cmd = append(cmd, "--termination-message-policy", string(corev1.TerminationMessageFallbackToLogsOnError))
	}
	cmd = append(cmd, "--")
	s.cmd = append(cmd, l.argv...)

	cfg := cr.config()
	if cfg.Backoff.Initial == nil {
		cfg.Backoff.Initial = m.opts.Backoff.Initial
	}
	if cfg.Backoff.Max == nil {
		cfg.Backoff.Max = m.opts.Backoff.Max
	}
	if cr.Kind != KindInit {
		// An init container that is not a sidecar has no probes.
		if cfg.Probes, err = wrappedProbes(m.object, c, m.pod.Spec.TerminationGracePeriodSeconds); err != nil {
			return s, err
		}
		var moved *rules.Probe
		if c.ReadinessProbe != nil || m.addReadiness {
			if s.readiness, moved, err = readinessFor(c); err != nil {
				return s, fmt.Errorf("%s: container %q: readinessProbe: %v", m.object, c.Name, err)
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
		return s, fmt.Errorf("%s: container %q: %v", m.object, c.Name, err)
	}
	s.liveness = cfg.Probes != nil && cfg.Probes.Liveness != nil
	s.startup = cfg.Probes != nil && cfg.Probes.Startup != nil
	cfgJSON, err := cfg.Marshal()
	if err != nil {
		return s, fmt.Errorf("%s: container %q: %v", m.object, c.Name, err)
	}
	s.env = []corev1.EnvVar{
		{Name: contract.EnvStateDir, Value: contract.StateDir},
		{Name: contract.EnvContainerName, Value: name},
		{Name: contract.EnvConfig, Value: escapeExpansion(string(cfgJSON))},
	}
	if l.platforms != "" {
		s.env = append(s.env, corev1.EnvVar{Name: contract.EnvPlatformCommands, Value: l.platforms})
	}
	if m.members && member {
		// One fieldRef per container, not the list itself: the list
		// repeated in each of N containers made the patch grow with N².
		s.env = append(s.env, corev1.EnvVar{Name: contract.EnvPodMembers, ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: contract.PodMembersFieldPath}}})
	}
	if sig, ok := stopSignal(c, l); ok {
		// The runtime stops the container with this signal instead of
		// SIGTERM: the supervisor must take it as a stop, not forward it
		// and then judge the workload's exit by the rules.
		s.env = append(s.env, corev1.EnvVar{Name: contract.EnvStopSignals, Value: "SIGTERM,SIGINT," + sig})
	}
	if sp := m.pod.Spec.ShareProcessNamespace; sp != nil && *sp {
		// Not PID 1: the workload would outlive a supervisor killed by
		// the runtime, so the supervisor kills it when the runtime would.
		grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
		if g := m.pod.Spec.TerminationGracePeriodSeconds; g != nil {
			grace = *g
		}
		s.env = append(s.env, corev1.EnvVar{Name: contract.EnvGracePeriod, Value: strconv.FormatInt(grace, 10) + "s"})
	}
	s.mounts = []corev1.VolumeMount{
		{Name: contract.BinVolume, MountPath: contract.BinDir, ReadOnly: true},
		{Name: contract.StateVolume, MountPath: contract.StateDir},
	}
	return s, nil
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

// stopSignal returns the signal the runtime stops the container with,
// when the supervisor must add it to its stop signals: the container's
// lifecycle.stopSignal (1.33+, gate ContainerStopSignals), else the
// image's STOPSIGNAL, as containerd chooses.
func stopSignal(c *corev1.Container, l launch) (string, bool) {
	if c.Lifecycle != nil && c.Lifecycle.StopSignal != nil && *c.Lifecycle.StopSignal != "" {
		return contract.ExtraStopSignal(string(*c.Lifecycle.StopSignal))
	}
	return contract.ExtraStopSignal(l.stopSignal)
}

// launch is how a wrapped container's workload is started.
type launch struct {
	// argv goes after "--", following the Kubernetes command/args table;
	// the container's args stay where they are. Empty when the image's
	// entrypoint differs per platform: platforms then holds the
	// RESTART_SUPERVISOR_PLATFORM_COMMANDS value.
	argv      []string
	platforms string
	// stopSignal is the image's STOPSIGNAL, known only when the image was
	// looked up for its entrypoint.
	stopSignal string
	warnings   []string
	// fromPod: argv is the pod's own (command, or the entrypoint
	// annotation), not an image's.
	fromPod bool
}

// entrypoint works out the container's launch from its command, the
// entrypoint annotation or, failing both, the image's configuration.
func (m *mutation) entrypoint(c *corev1.Container) (launch, error) {
	var warnings []string
	object := m.object
	override, hasOverride := m.pod.Annotations[contract.AnnotationEntrypoint+c.Name]
	if len(c.Command) > 0 {
		if hasOverride {
			warnings = append(warnings, fmt.Sprintf("%s: container %q sets command; annotation %s%s is ignored", object, c.Name, contract.AnnotationEntrypoint, c.Name))
		}
		return launch{argv: c.Command, warnings: warnings, fromPod: true}, nil
	}
	if hasOverride {
		var v []string
		if err := json.Unmarshal([]byte(override), &v); err != nil || len(v) == 0 {
			return launch{}, fmt.Errorf("%s: metadata.annotations[%s%s]: want a non-empty JSON array of strings", object, contract.AnnotationEntrypoint, c.Name)
		}
		return launch{argv: v, fromPod: true}, nil
	}
	eerr := func(e error) error {
		return &EntrypointError{Object: object, Container: c.Name, Image: c.Image, Err: e}
	}
	if m.opts.Resolver == nil {
		return launch{}, eerr(fmt.Errorf("container has no command and registry lookup is disabled"))
	}
	var secrets []string
	for _, s := range m.pod.Spec.ImagePullSecrets {
		secrets = append(secrets, s.Name)
	}
	img, err := m.opts.Resolver.Resolve(m.ctx, c.Image, m.namespace, secrets)
	if err != nil {
		return launch{}, eerr(err)
	}
	hasArgs := len(c.Args) > 0
	if cfg, ok := img.Uniform(); ok {
		argv := imageArgv(cfg, hasArgs)
		if len(argv) == 0 && !hasArgs {
			return launch{}, eerr(fmt.Errorf("image %s has neither ENTRYPOINT nor CMD", img.Digest))
		}
		return launch{argv: escapeAll(argv), stopSignal: cfg.StopSignal}, nil
	}
	perPlatform := map[string][]string{}
	for k, cfg := range img.Platforms {
		argv := imageArgv(cfg, hasArgs)
		if len(argv) == 0 && !hasArgs {
			warnings = append(warnings, fmt.Sprintf("%s: container %q: image %s has neither ENTRYPOINT nor CMD on platform %s", object, c.Name, c.Image, k))
			continue
		}
		perPlatform[k] = argv
	}
	if len(perPlatform) == 0 {
		return launch{}, eerr(fmt.Errorf("image %s has neither ENTRYPOINT nor CMD on any platform", img.Digest))
	}
	sort.Strings(warnings)
	platforms, err := platformCommands(perPlatform)
	if err != nil {
		return launch{}, eerr(err)
	}
	return launch{platforms: platforms, stopSignal: img.StopSignal(), warnings: warnings}, nil
}

// MaxImageCommandsBytes caps the commands the image lookups add to one
// pod, all containers together: each container of an image gets its own
// copy, so the per-image caps alone would let many containers of one
// image build a patch of many MiB before the webhook's final bound
// (1 MiB) refused it.
const MaxImageCommandsBytes = 1 << 20

// MaxPlatformCommandsBytes caps the value of contract.EnvPlatformCommands: one
// environment string, which the kernel refuses over 128 KiB
// (MAX_ARG_STRLEN), and which every container of the image carries.
const MaxPlatformCommandsBytes = 96 << 10

// platformCommands encodes the argv of each platform as
// contract.EnvPlatformCommands, escaped for the kubelet's expansion. HTML is not
// escaped ("<" stays one byte, not six); the caps of the lookup
// (MaxImageArgvBytes) bound the input, MaxPlatformCommandsBytes the
// encoding, in which control characters and "$" still grow.
func platformCommands(perPlatform map[string][]string) (string, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(perPlatform) // map keys are sorted: the output is deterministic
	out := escapeExpansion(strings.TrimSuffix(b.String(), "\n"))
	if len(out) > MaxPlatformCommandsBytes {
		return "", fmt.Errorf("the entrypoints of the image's %d platforms take %d bytes in %s, over the cap of %d",
			len(perPlatform), len(out), contract.EnvPlatformCommands, MaxPlatformCommandsBytes)
	}
	return out, nil
}

// imageArgv is what the image contributes before the container's args:
// ENTRYPOINT alone when args are set (Kubernetes drops CMD), else
// ENTRYPOINT+CMD.
func imageArgv(cfg imagelookup.ImageConfig, hasArgs bool) []string {
	argv := append([]string(nil), cfg.Entrypoint...)
	if !hasArgs {
		argv = append(argv, cfg.Cmd...)
	}
	return argv
}

// escapeExpansion protects text that Kubernetes would otherwise expand:
// the kubelet turns "$$" into "$" and "$(NAME)" into a variable, so
// doubling every "$" yields the original text after expansion.
func escapeExpansion(s string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	return strings.ReplaceAll(s, "$", "$$")
}

func escapeAll(in []string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = escapeExpansion(s)
	}
	return out
}

type patchBuilder struct{ ops []PatchOp }

func (p *patchBuilder) add(path string, v any) {
	p.ops = append(p.ops, PatchOp{Op: "add", Path: path, Value: v})
}

func (p *patchBuilder) remove(path string) {
	p.ops = append(p.ops, PatchOp{Op: "remove", Path: path})
}

// setAnnotation records setting annotation key to value on the object
// whose metadata is meta. Pod templates may have no metadata or no
// annotations at all, and an "add" below a missing member fails.
func (p *patchBuilder) setAnnotation(meta *metav1.ObjectMeta, key, value string) {
	p.setAnnotations(meta, [2]string{key, value})
}

// setAnnotations records setting each key to its value, in one op when
// the object has no annotations yet.
func (p *patchBuilder) setAnnotations(meta *metav1.ObjectMeta, kv ...[2]string) {
	all := map[string]string{}
	for _, e := range kv {
		all[e[0]] = e[1]
	}
	switch {
	case reflect.DeepEqual(*meta, metav1.ObjectMeta{}):
		p.add("/metadata", map[string]any{"annotations": all})
	case len(meta.Annotations) == 0:
		p.add("/metadata/annotations", all)
	default:
		for _, e := range kv {
			p.add("/metadata/annotations/"+yamledit.EscapeToken(e[0]), e[1])
		}
	}
}

// addToArray appends items to the array at path, creating it when the
// input has none (an "add .../-" on a missing array fails).
func addToArray[T any](p *patchBuilder, path string, existing int, items ...T) {
	if existing == 0 {
		p.add(path, items)
		return
	}
	for _, it := range items {
		p.add(path+"/-", it)
	}
}

// windowsOnly names the field that binds a pod to Windows nodes: os.name,
// the nodeSelector kubernetes.io/os, or a required node affinity every
// term of which asks for kubernetes.io/os windows. "" when none does.
func windowsOnly(spec *corev1.PodSpec) string {
	if spec.OS != nil && spec.OS.Name == corev1.Windows {
		return "os.name"
	}
	if spec.NodeSelector[corev1.LabelOSStable] == string(corev1.Windows) {
		return "nodeSelector: " + corev1.LabelOSStable + "=windows"
	}
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	terms := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for _, term := range terms {
		if !termWindowsOnly(term) {
			return ""
		}
	}
	if len(terms) == 0 {
		return ""
	}
	return "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution: " + corev1.LabelOSStable + " windows"
}

// termWindowsOnly: the term (its expressions are ANDed) only matches nodes
// labelled kubernetes.io/os=windows.
func termWindowsOnly(term corev1.NodeSelectorTerm) bool {
	for _, e := range term.MatchExpressions {
		if e.Key == corev1.LabelOSStable && e.Operator == corev1.NodeSelectorOpIn && len(e.Values) > 0 &&
			!slices.ContainsFunc(e.Values, func(v string) bool { return v != string(corev1.Windows) }) {
			return true
		}
	}
	return false
}
