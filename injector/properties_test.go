package injector

import (
	"context"
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"slices"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/internal/yamledit"
)

// goldenPods returns every Pod and pod template of the golden inputs.
func goldenPods(t *testing.T) map[string]*corev1.Pod {
	pods := map[string]*corev1.Pod{}
	for _, f := range goldenInputs(t) {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var visit func(obj map[string]any)
		visit = func(obj map[string]any) {
			u := &unstructured.Unstructured{Object: obj}
			if items, ok := obj["items"].([]any); ok {
				for _, it := range items {
					visit(it.(map[string]any))
				}
				return
			}
			ts, _, err := templatesOf(obj, u.GetAPIVersion(), u.GetKind())
			if err != nil {
				t.Fatal(err)
			}
			object := ObjectName(u.GetKind(), u.GetNamespace(), u.GetName(), u.GetGenerateName())
			for _, tm := range ts {
				pod, err := templatePod(tm, object)
				if err != nil {
					t.Fatal(err)
				}
				pods[f+" "+object+" "+tm.label()] = pod
			}
		}
		for _, obj := range readDocs(t, src) {
			visit(obj)
		}
	}
	if len(pods) < 15 {
		t.Fatalf("only %d pods in the golden inputs", len(pods))
	}
	return pods
}

// propertyPods are the golden pods and aliasTrapPod.
func propertyPods(t *testing.T) map[string]*corev1.Pod {
	pods := goldenPods(t)
	pods["aliasTrapPod"] = aliasTrapPod()
	// The same with a pod restart rule: plain-init gets a re-run sidecar
	// built from its fields.
	all := aliasTrapPod()
	all.Spec.Containers[0].RestartPolicyRules = append(all.Spec.Containers[0].RestartPolicyRules, corev1.ContainerRestartRule{
		Action:    corev1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{88}}})
	pods["aliasTrapPodRestartAll"] = all
	return pods
}

// aliasTrapPod has every kind of container the injector wraps or leaves
// alone next to each other, rules from both carriers, and slices with room
// to grow: an append to a slice shared with the input would write there
// without changing what the input shows.
func aliasTrapPod() *corev1.Pod {
	roomy := func(env ...corev1.EnvVar) []corev1.EnvVar { return append(make([]corev1.EnvVar, 0, 8), env...) }
	mounts := func() []corev1.VolumeMount {
		return append(make([]corev1.VolumeMount, 0, 8), corev1.VolumeMount{Name: "data", MountPath: "/data"})
	}
	rule := []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	always, never := corev1.ContainerRestartPolicyAlways, corev1.ContainerRestartPolicyNever
	pod := &corev1.Pod{}
	pod.Name, pod.Namespace = "trap", "shop"
	pod.Labels = map[string]string{"app": "trap"}
	pod.Annotations = map[string]string{contract.AnnotationRules: `{"no-command": {"restartPolicy": "OnFailure"}}`}
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	pod.Spec.Volumes = append(make([]corev1.Volume, 0, 8), corev1.Volume{Name: "data"})
	pod.Spec.InitContainers = append(make([]corev1.Container, 0, 8),
		corev1.Container{Name: "plain-init", Image: "registry.test/app:1", Command: []string{"/prepare"}, Env: roomy(corev1.EnvVar{Name: "A", Value: "1"}), VolumeMounts: mounts()},
		corev1.Container{Name: "ruled-init", Image: "registry.test/app:1", Command: []string{"/fetch"}, RestartPolicy: &never, RestartPolicyRules: rule,
			Env: roomy(corev1.EnvVar{Name: "B", Value: "2"}), VolumeMounts: mounts()},
		corev1.Container{Name: "sidecar", Image: "registry.test/app:1", Command: []string{"/proxy"}, RestartPolicy: &always, RestartPolicyRules: rule,
			Env: roomy(), VolumeMounts: mounts()},
		corev1.Container{Name: "plain-sidecar", Image: "registry.test/app:1", Command: []string{"/ship"}, RestartPolicy: &always, Env: roomy(corev1.EnvVar{Name: "C", Value: "3"})},
	)
	pod.Spec.Containers = append(make([]corev1.Container, 0, 8),
		corev1.Container{Name: "native", Image: "registry.test/app:1", Command: append(make([]string, 0, 8), "/serve"), Args: []string{"--port=8080"},
			RestartPolicy: &never, RestartPolicyRules: rule, Env: roomy(corev1.EnvVar{Name: "D", Value: "$(A)"}), VolumeMounts: mounts(),
			TerminationMessagePath: "/tmp/msg"},
		corev1.Container{Name: "no-command", Image: "registry.test/app:1", Args: []string{"--queue", "q"}, Env: roomy(corev1.EnvVar{Name: "E", Value: "5"})},
		corev1.Container{Name: "plain", Image: "registry.test/app:1", Command: []string{"/log"}, Env: roomy(corev1.EnvVar{Name: "F", Value: "6"}), VolumeMounts: mounts()},
	)
	return pod
}

// TestPatchMatchesMutatedPod: the webhook's patch applied to the input
// gives exactly Result.Pod, the input is left alone, PodPatch (the
// webhook's call) answers the same without Result.Pod, and a second run on
// the output yields no operation.
func TestPatchMatchesMutatedPod(t *testing.T) {
	inj, _ := goldenInjector(t)
	injected := 0
	// The kinds of wrapped container whose edits could reach the input
	// through a shared slice or index; the golden pods must cover them all.
	covered := map[string]bool{}
	for name, pod := range propertyPods(t) {
		before := pod.DeepCopy()
		res, err := inj.MutatePod(context.Background(), pod)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !apiequality.Semantic.DeepEqual(pod, before) {
			t.Errorf("%s: MutatePod modified its input", name)
		}
		patchOnly, err := inj.PodPatch(context.Background(), pod)
		if err != nil {
			t.Fatalf("%s: PodPatch: %v", name, err)
		}
		if !apiequality.Semantic.DeepEqual(pod, before) {
			t.Errorf("%s: PodPatch modified its input", name)
		}
		if patchOnly.Pod != nil {
			t.Errorf("%s: PodPatch returned a pod", name)
		}
		patchOnly.Pod = res.Pod
		if !reflect.DeepEqual(patchOnly, res) {
			t.Errorf("%s: PodPatch and MutatePod differ:\n%+v\n%+v", name, patchOnly, res)
		}
		if res.Injected {
			noteCoverage(t, covered, pod, res.Containers)
		}
		if !res.Injected {
			if len(res.Patch) != 0 || !apiequality.Semantic.DeepEqual(res.Pod, pod) {
				t.Errorf("%s: not injected but patch %v / pod changed", name, res.Patch)
			}
			continue
		}
		injected++
		orig, _ := json.Marshal(pod)
		ops, _ := json.Marshal(res.Patch)
		patch, err := jsonpatch.DecodePatch(ops)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		patched, err := patch.Apply(orig)
		if err != nil {
			t.Fatalf("%s: patch does not apply: %v\n%s", name, err, ops)
		}
		var got corev1.Pod
		if err := json.Unmarshal(patched, &got); err != nil {
			t.Fatal(err)
		}
		if !apiequality.Semantic.DeepEqual(&got, res.Pod) {
			want, _ := json.Marshal(res.Pod)
			t.Errorf("%s: patched input differs from Result.Pod\npatched: %s\nmutated: %s", name, patched, want)
		}
		again, err := inj.MutatePod(context.Background(), res.Pod)
		if err != nil {
			t.Fatalf("%s: second run: %v", name, err)
		}
		if again.Injected || len(again.Patch) != 0 {
			t.Errorf("%s: second run produced %v", name, again.Patch)
		}
	}
	if injected < 10 {
		t.Fatalf("only %d golden pods were injected", injected)
	}
	for _, k := range []string{"init container", "sidecar", "container", "container without command", "rules annotation", "rules fields", "restartPolicy field dropped", "re-run sidecar"} {
		if !covered[k] {
			t.Errorf("no injected golden pod has a wrapped %s", k)
		}
	}
}

func noteCoverage(t *testing.T, covered map[string]bool, pod *corev1.Pod, wrapped []string) {
	crs, err := PodRules(pod, "spec", "pod")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range wrapped {
		if !slices.ContainsFunc(crs, func(cr ContainerRules) bool { return cr.Name == name }) {
			covered["re-run sidecar"] = true
		}
	}
	for _, cr := range crs {
		if !slices.Contains(wrapped, cr.Name) {
			continue
		}
		list := pod.Spec.Containers
		switch cr.Kind {
		case KindInit:
			covered["init container"] = true
			list = pod.Spec.InitContainers
		case KindSidecar:
			covered["sidecar"] = true
			list = pod.Spec.InitContainers
		default:
			covered["container"] = true
		}
		if len(list[cr.Index].Command) == 0 {
			covered["container without command"] = true
		}
		covered["rules annotation"] = covered["rules annotation"] || cr.FromAnnotation
		covered["rules fields"] = covered["rules fields"] || cr.nativeRules
		covered["restartPolicy field dropped"] = covered["restartPolicy field dropped"] || (cr.nativePolicy && cr.Kind != KindSidecar)
	}
}

// TestResultPodSharesNothing: Result.Pod is a copy a caller may edit
// freely. Every field, slice element and map reachable from it is
// overwritten, and the input must not change.
func TestResultPodSharesNothing(t *testing.T) {
	inj, _ := goldenInjector(t)
	for name, pod := range propertyPods(t) {
		before := pod.DeepCopy()
		res, err := inj.MutatePod(context.Background(), pod)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		scribble(reflect.ValueOf(res.Pod))
		if !apiequality.Semantic.DeepEqual(pod, before) {
			t.Errorf("%s: editing Result.Pod changed the input", name)
		}
	}
}

// scribble changes every settable value reachable from v and adds a key to
// every map with string keys.
func scribble(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			scribble(v.Elem())
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				scribble(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			scribble(v.Index(i))
		}
	case reflect.Map:
		if v.IsNil() {
			return
		}
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			scribble(e)
			v.SetMapIndex(k, e)
		}
		if v.Type().Key().Kind() == reflect.String {
			k := reflect.New(v.Type().Key()).Elem()
			k.SetString("scribbled")
			v.SetMapIndex(k, reflect.Zero(v.Type().Elem()))
		}
	case reflect.String:
		if v.CanSet() {
			v.SetString(v.String() + "~")
		}
	case reflect.Bool:
		if v.CanSet() {
			v.SetBool(!v.Bool())
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if v.CanSet() {
			v.SetInt(v.Int() ^ 1)
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if v.CanSet() {
			v.SetUint(v.Uint() ^ 1)
		}
	}
}

// TestPatchArrayTraps checks the operations that fail when done naively.
func TestPatchArrayTraps(t *testing.T) {
	inj := New(Options{})
	bare := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "a", Image: "x", Command: []string{"/a"}, RestartPolicy: ptr.To(corev1.ContainerRestartPolicyNever)}}}}
	res, err := inj.MutatePod(context.Background(), bare)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"/metadata": true, "/spec/volumes": true, "/spec/initContainers": true,
		"/spec/containers/0/env": true, "/spec/containers/0/volumeMounts": true}
	for _, op := range res.Patch {
		delete(want, op.Path)
	}
	if len(want) != 0 {
		t.Errorf("pod without metadata, volumes, init containers, env or mounts: missing whole-array/object adds %v in %v", want, res.Patch)
	}

	full := bare.DeepCopy()
	full.Annotations = map[string]string{"a/b~c": "x"}
	full.Spec.Volumes = []corev1.Volume{{Name: "v"}}
	full.Spec.InitContainers = []corev1.Container{{Name: "i", Image: "x", Command: []string{"/i"}}}
	full.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "E", Value: "1"}}
	full.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "v", MountPath: "/v"}}
	res, err = inj.MutatePod(context.Background(), full)
	if err != nil {
		t.Fatal(err)
	}
	want = map[string]bool{"/metadata/annotations/restart-supervisor.dev~1status": true, "/spec/volumes/-": true,
		"/spec/initContainers/0": true, "/spec/containers/0/env/-": true, "/spec/containers/0/volumeMounts/-": true,
		"/spec/containers/0/restartPolicy": true}
	for _, op := range res.Patch {
		delete(want, op.Path)
	}
	if len(want) != 0 {
		t.Errorf("missing append/insert operations %v in %v", want, res.Patch)
	}
	if got := yamledit.EscapeToken("a/b~c"); got != "a~1b~0c" {
		t.Errorf("escapePointer = %q", got)
	}
}

// harden makes a pod meet the restricted profile the way a careful user
// would, so that any violation in the output is the injector's.
func harden(pod *corev1.Pod) *corev1.Pod {
	p := pod.DeepCopy()
	p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range list {
			if list[i].Name == contract.InstallContainer {
				continue
			}
			list[i].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
		}
	}
	return p
}

func TestOutputPassesRestrictedPSS(t *testing.T) {
	ev, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lv := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	check := func(name string, pod *corev1.Pod) bool {
		r := policy.AggregateCheckResults(ev.EvaluatePod(lv, &pod.ObjectMeta, &pod.Spec))
		if !r.Allowed {
			t.Errorf("%s: restricted: %s", name, r.ForbiddenDetail())
		}
		return r.Allowed
	}
	inj, _ := goldenInjector(t)
	for name, pod := range goldenPods(t) {
		in := harden(pod)
		if !check(name+" (input)", in) {
			continue
		}
		res, err := inj.MutatePod(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		check(name+" (output)", res.Pod)
	}
	// The install container alone, in a pod that sets nothing at pod level.
	res, err := inj.MutatePod(context.Background(), &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "a", Image: "x", Command: []string{"/a"}, RestartPolicy: ptr.To(corev1.ContainerRestartPolicyNever)}}}})
	if err != nil {
		t.Fatal(err)
	}
	only := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: res.Pod.Spec.InitContainers[:1], Volumes: res.Pod.Spec.Volumes,
		Containers: []corev1.Container{*harden(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}).Spec.Containers[0].DeepCopy()}}}
	only.Spec.Containers[0].SecurityContext.RunAsNonRoot = ptr.To(true)
	only.Spec.Containers[0].SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	check("install container", only)
}

// qosClass follows the kubelet's GetPodQOS (pkg/apis/core/v1/helper/qos)
// for pods without pod-level resources.
func qosClass(pod *corev1.Pod) corev1.PodQOSClass {
	requests, limits := corev1.ResourceList{}, corev1.ResourceList{}
	guaranteed := true
	supported := func(n corev1.ResourceName) bool { return n == corev1.ResourceCPU || n == corev1.ResourceMemory }
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			for n, q := range c.Resources.Requests {
				if supported(n) && q.Sign() > 0 {
					sum := requests[n]
					sum.Add(q)
					requests[n] = sum
				}
			}
			found := 0
			for n, q := range c.Resources.Limits {
				if supported(n) && q.Sign() > 0 {
					found++
					sum := limits[n]
					sum.Add(q)
					limits[n] = sum
				}
			}
			if found != 2 {
				guaranteed = false
			}
		}
	}
	if len(requests) == 0 && len(limits) == 0 {
		return corev1.PodQOSBestEffort
	}
	if guaranteed {
		for n, r := range requests {
			if l, ok := limits[n]; !ok || l.Cmp(r) != 0 {
				guaranteed = false
			}
		}
	}
	if guaranteed && len(requests) == len(limits) {
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}

func TestQoSClassPreserved(t *testing.T) {
	inj, _ := goldenInjector(t)
	seen := map[corev1.PodQOSClass]bool{}
	for name, pod := range goldenPods(t) {
		res, err := inj.MutatePod(context.Background(), pod)
		if err != nil {
			t.Fatal(err)
		}
		before, after := qosClass(pod), qosClass(res.Pod)
		if before != after {
			t.Errorf("%s: QoS %s became %s", name, before, after)
		}
		if res.Injected {
			seen[before] = true
		}
	}
	for _, c := range []corev1.PodQOSClass{corev1.PodQOSGuaranteed, corev1.PodQOSBurstable, corev1.PodQOSBestEffort} {
		if !seen[c] {
			t.Errorf("no injected golden pod of class %s", c)
		}
	}
}

var envName = regexp.MustCompile(`^[-._a-zA-Z][-._a-zA-Z0-9]*$`)

// TestOutputIsValidPod reproduces the API server's pod validation rules
// that an injection could break.
func TestOutputIsValidPod(t *testing.T) {
	inj, _ := goldenInjector(t)
	for name, pod := range goldenPods(t) {
		res, err := inj.MutatePod(context.Background(), pod)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range validatePod(res.Pod, res.Containers) {
			t.Errorf("%s: %s", name, e)
		}
	}
}

func validatePod(p *corev1.Pod, wrapped []string) []string {
	var errs []string
	bad := func(s string) { errs = append(errs, s) }
	vols := map[string]bool{}
	for _, v := range p.Spec.Volumes {
		if vols[v.Name] {
			bad("duplicate volume " + v.Name)
		}
		vols[v.Name] = true
		if v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil && v.EmptyDir.SizeLimit.Cmp(resource.Quantity{}) <= 0 {
			bad("emptyDir sizeLimit must be positive: " + v.Name)
		}
	}
	names := map[string]bool{}
	isWrapped := map[string]bool{}
	for _, n := range wrapped {
		isWrapped[n] = true
	}
	for li, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range list {
			if names[c.Name] {
				bad("duplicate container name " + c.Name)
			}
			names[c.Name] = true
			if li == 1 && (c.RestartPolicy != nil || len(c.RestartPolicyRules) > 0) {
				bad(c.Name + ": regular container keeps restartPolicy/restartPolicyRules, which an API server without KEP-5307 rejects")
			}
			if li == 0 && (len(c.RestartPolicyRules) > 0 || (c.RestartPolicy != nil && *c.RestartPolicy != corev1.ContainerRestartPolicyAlways)) {
				bad(c.Name + ": init container keeps KEP-5307 fields")
			}
			paths := map[string]bool{}
			for _, m := range c.VolumeMounts {
				if !vols[m.Name] {
					bad(c.Name + ": mount of unknown volume " + m.Name)
				}
				if paths[m.MountPath] {
					bad(c.Name + ": duplicate mountPath " + m.MountPath)
				}
				paths[m.MountPath] = true
				if m.Name == contract.BinVolume && c.Name != contract.InstallContainer && !m.ReadOnly {
					bad(c.Name + ": supervisor binary mounted read-write")
				}
			}
			for _, e := range c.Env {
				if !envName.MatchString(e.Name) {
					bad(c.Name + ": invalid env name " + e.Name)
				}
			}
			if isWrapped[c.Name] && (len(c.Command) < 2 || c.Command[0] != contract.SupervisorPath) {
				bad(c.Name + ": wrapped container does not start the supervisor")
			}
		}
	}
	if len(wrapped) > 0 && (len(p.Spec.InitContainers) == 0 || p.Spec.InitContainers[0].Name != contract.InstallContainer) {
		bad("install container is not the first init container")
	}
	return errs
}

// TestRestartAllWrapsEverySidecarAndContainer: in a pod where any rule says
// RestartAllContainers, every native sidecar and regular container is
// wrapped, since the kubelet restarts each of them, and a regular init
// container is wrapped only for rules of its own. Every property pod is
// checked as it is and with such a rule added to its first container.
func TestRestartAllWrapsEverySidecarAndContainer(t *testing.T) {
	inj, _ := goldenInjector(t)
	restartAll := corev1.ContainerRestartRule{Action: corev1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{88}}}
	never := corev1.ContainerRestartPolicyNever
	checked := 0
	for name, pod := range propertyPods(t) {
		if pod.Annotations[contract.AnnotationStatus] != "" || len(pod.Spec.Containers) == 0 {
			continue
		}
		variant := pod.DeepCopy()
		c := &variant.Spec.Containers[0]
		if c.RestartPolicy == nil {
			c.RestartPolicy = &never
		}
		c.RestartPolicyRules = append(c.RestartPolicyRules, restartAll)
		for label, p := range map[string]*corev1.Pod{name: pod, name + " + RestartAllContainers": variant} {
			crs, err := PodRules(p, "spec", "pod")
			if err != nil {
				continue // a variant the API server would refuse
			}
			any := false
			for _, cr := range crs {
				for _, r := range cr.Rules.RestartPolicyRules {
					any = any || r.Action == "RestartAllContainers"
				}
			}
			if !any {
				continue
			}
			res, err := inj.MutatePod(context.Background(), p)
			if err != nil {
				t.Fatalf("%s: %v", label, err)
			}
			checked++
			for _, cr := range crs {
				want := (cr.Kind != KindInit && !cr.tool) || cr.Ruled
				if got := slices.Contains(res.Containers, cr.Name); got != want {
					t.Errorf("%s: %s container %q wrapped=%v, want %v", label, cr.Kind, cr.Name, got, want)
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d pods with RestartAllContainers checked", checked)
	}
}
