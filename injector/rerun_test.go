package injector

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// rerunGoldenPod reads the pod named name from testdata/in/rerun.yaml.
func rerunGoldenPod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	for key, pod := range goldenPods(t) {
		if strings.HasSuffix(strings.Fields(key)[0], "rerun.yaml") && pod.Name == name {
			return pod
		}
	}
	t.Fatalf("no pod %q in testdata/in/rerun.yaml", name)
	return nil
}

func containerNamed(t *testing.T, list []corev1.Container, name string) (int, *corev1.Container) {
	t.Helper()
	for i := range list {
		if list[i].Name == name {
			return i, &list[i]
		}
	}
	t.Fatalf("no container %q", name)
	return 0, nil
}

func envOf(c *corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// membersOf is c's contract.EnvPodMembers as the kubelet resolves it in pod: a
// fieldRef to the annotation that holds the list; ok false when c has no
// such variable.
func membersOf(pod *corev1.Pod, c *corev1.Container) (string, bool) {
	for _, e := range c.Env {
		if e.Name != contract.EnvPodMembers {
			continue
		}
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != contract.PodMembersFieldPath || e.Value != "" {
			return "<not a fieldRef to " + contract.AnnotationPodMembers + ">", true
		}
		return pod.Annotations[contract.AnnotationPodMembers], true
	}
	return "", false
}

// TestRerunSidecar: on the webhook's path, each regular init container of
// a pod that restarts all containers is followed by its re-run sidecar:
// the init container's own fields, wrapped with the configuration the init
// container itself gets, restartPolicy Always, and nothing that would
// change resources, probes or hooks. The init containers stay as they
// were, and the members are listed in spec.initContainers order.
func TestRerunSidecar(t *testing.T) {
	inj, _ := goldenInjector(t)
	pod := rerunGoldenPod(t, "trainer")
	res, err := inj.MutatePod(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	out := res.Pod
	var names []string
	for _, c := range out.Spec.InitContainers {
		names = append(names, c.Name)
	}
	want := []string{contract.InstallContainer, "fetch", "fetch-rerun", "proxy", "rendezvous", "rendezvous-rerun", "status-tool"}
	if !slices.Equal(names, want) {
		t.Fatalf("init containers %q, want %q", names, want)
	}
	const members = "fetch-rerun:init,proxy:sidecar,rendezvous-rerun:init,trainer:regular"
	crs, err := PodRules(pod, "spec", "pod")
	if err != nil {
		t.Fatal(err)
	}
	for _, init := range []string{"fetch", "rendezvous"} {
		_, orig := containerNamed(t, pod.Spec.InitContainers, init)
		i, rc := containerNamed(t, out.Spec.InitContainers, init+contract.InitRerunSuffix)
		if out.Spec.InitContainers[i-1].Name != init {
			t.Errorf("%s-rerun follows %q, want %q", init, out.Spec.InitContainers[i-1].Name, init)
		}
		// The fields a re-run needs to do what the init container did.
		if rc.Image != orig.Image || rc.ImagePullPolicy != orig.ImagePullPolicy || !slices.Equal(rc.Args, orig.Args) ||
			rc.WorkingDir != orig.WorkingDir || !apiequality.Semantic.DeepEqual(rc.EnvFrom, orig.EnvFrom) ||
			!apiequality.Semantic.DeepEqual(rc.VolumeDevices, orig.VolumeDevices) ||
			!apiequality.Semantic.DeepEqual(rc.SecurityContext, orig.SecurityContext) ||
			rc.Stdin != orig.Stdin || rc.StdinOnce != orig.StdinOnce || rc.TTY != orig.TTY ||
			rc.TerminationMessagePath != orig.TerminationMessagePath || rc.TerminationMessagePolicy != orig.TerminationMessagePolicy {
			t.Errorf("%s: fields differ from the init container:\n%+v\n%+v", rc.Name, rc, orig)
		}
		if !apiequality.Semantic.DeepEqual(rc.Env[:len(orig.Env)], orig.Env) || !apiequality.Semantic.DeepEqual(rc.VolumeMounts[:len(orig.VolumeMounts)], orig.VolumeMounts) {
			t.Errorf("%s: env or mounts do not start with the init container's: %+v %+v", rc.Name, rc.Env, rc.VolumeMounts)
		}
		wantMounts := append(slices.Clone(orig.VolumeMounts),
			corev1.VolumeMount{Name: contract.BinVolume, MountPath: contract.BinDir, ReadOnly: true}, corev1.VolumeMount{Name: contract.StateVolume, MountPath: contract.StateDir})
		if !apiequality.Semantic.DeepEqual(rc.VolumeMounts, wantMounts) {
			t.Errorf("%s: mounts %+v, want %+v", rc.Name, rc.VolumeMounts, wantMounts)
		}
		if rc.RestartPolicy == nil || *rc.RestartPolicy != corev1.ContainerRestartPolicyAlways || len(rc.RestartPolicyRules) != 0 {
			t.Errorf("%s: restartPolicy %v, rules %v; want Always and none", rc.Name, rc.RestartPolicy, rc.RestartPolicyRules)
		}
		if !apiequality.Semantic.DeepEqual(rc.Resources, corev1.ResourceRequirements{}) || rc.ResizePolicy != nil {
			t.Errorf("%s: resources %+v", rc.Name, rc.Resources)
		}
		if rc.StartupProbe != nil || rc.LivenessProbe != nil || rc.ReadinessProbe != nil || rc.Lifecycle != nil {
			t.Errorf("%s: probes or lifecycle: %+v", rc.Name, rc)
		}
		if len(rc.Command) < 2 || rc.Command[0] != contract.SupervisorPath {
			t.Errorf("%s: command %q", rc.Name, rc.Command)
		}
		for name, want := range map[string]string{contract.EnvContainerName: rc.Name, contract.EnvStateDir: contract.StateDir} {
			if got, _ := envOf(rc, name); got != want {
				t.Errorf("%s: %s=%q, want %q", rc.Name, name, got, want)
			}
		}
		if got, _ := membersOf(out, rc); got != members {
			t.Errorf("%s: %s=%q, want %q", rc.Name, contract.EnvPodMembers, got, members)
		}
		var cfg rules.Config
		for _, cr := range crs {
			if cr.Name == init {
				cfg = cr.config()
			}
		}
		want, _ := cfg.Marshal()
		if got, _ := envOf(rc, contract.EnvConfig); got != string(want) || !cfg.InitContainer || cfg.PodRestartPolicy != rules.Never {
			t.Errorf("%s: %s=%s, want %s (the init container's)", rc.Name, contract.EnvConfig, got, want)
		}
	}
	// The init containers are unchanged: fetch has no rules, rendezvous
	// is wrapped for its own and, like any init container, is no member.
	_, fetch := containerNamed(t, out.Spec.InitContainers, "fetch")
	if _, orig := containerNamed(t, pod.Spec.InitContainers, "fetch"); !apiequality.Semantic.DeepEqual(fetch, orig) {
		t.Errorf("fetch changed:\n%+v\n%+v", fetch, orig)
	}
	_, rdv := containerNamed(t, out.Spec.InitContainers, "rendezvous")
	if _, ok := membersOf(out, rdv); ok || rdv.Command[0] != contract.SupervisorPath {
		t.Errorf("rendezvous: command %q, env %+v", rdv.Command, rdv.Env)
	}
	for _, c := range []*corev1.Container{&out.Spec.InitContainers[3], &out.Spec.Containers[0]} {
		if got, _ := membersOf(out, c); got != members {
			t.Errorf("%s: %s=%q, want %q", c.Name, contract.EnvPodMembers, got, members)
		}
	}
	if !slices.Equal(res.Containers, []string{"fetch-rerun", "proxy", "rendezvous", "rendezvous-rerun", "trainer"}) {
		t.Errorf("wrapped %q", res.Containers)
	}
	if len(res.Warnings) != 0 {
		t.Errorf("warnings: %q", res.Warnings)
	}
}

// TestRerunOnlyWithRestartAll: a pod without a RestartAllContainers rule
// gets no re-run sidecar, whatever else it carries.
func TestRerunOnlyWithRestartAll(t *testing.T) {
	inj, _ := goldenInjector(t)
	pod := rerunGoldenPod(t, "trainer")
	pod.Spec.Containers[0].RestartPolicyRules[0].Action = corev1.ContainerRestartRuleActionRestart
	res, err := inj.MutatePod(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Pod.Spec.InitContainers {
		if strings.HasSuffix(c.Name, contract.InitRerunSuffix) {
			t.Errorf("re-run sidecar %q without RestartAllContainers", c.Name)
		}
	}
}

// TestRerunOnlyWhereLimitsStay: re-run sidecars, which declare no
// resources, go in only when they cannot change the QoS class or the pod
// cgroup's limits: for each of cpu and memory, a pod-level limit or some
// container without a limit of it. Otherwise there are none and one
// warning says why.
func TestRerunOnlyWhereLimitsStay(t *testing.T) {
	inj, _ := goldenInjector(t)
	limits := func(cpu, memory string) corev1.ResourceRequirements {
		rl := corev1.ResourceList{}
		if cpu != "" {
			rl[corev1.ResourceCPU] = resource.MustParse(cpu)
		}
		if memory != "" {
			rl[corev1.ResourceMemory] = resource.MustParse(memory)
		}
		return corev1.ResourceRequirements{Limits: rl}
	}
	for _, tc := range []struct {
		name             string
		init, side, main corev1.ResourceRequirements
		podLevel         *corev1.ResourceRequirements
		reruns           bool
		warning          string
	}{
		{name: "no limits", reruns: true},
		{name: "requests only", main: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}, reruns: true},
		{name: "cpu and memory missing in different containers", init: limits("1", ""), side: limits("", "1Gi"), main: limits("1", "1Gi"), reruns: true},
		{name: "every container limits both", init: limits("1", "1Gi"), side: limits("1", "1Gi"), main: limits("2", "2Gi"),
			warning: "since every container declares cpu and memory limits"},
		{name: "every container a memory limit", init: limits("", "1Gi"), side: limits("1", "1Gi"), main: limits("", "2Gi"),
			warning: "since every container declares a memory limit"},
		{name: "every container a cpu limit", init: limits("1", ""), side: limits("1", "1Gi"), main: limits("2", ""),
			warning: "since every container declares a cpu limit"},
		{name: "a zero limit is none", init: limits("0", "1Gi"), side: limits("1", "0"), main: limits("2", "2Gi"), reruns: true},
		{name: "pod-level memory limit only", init: limits("1", "1Gi"), side: limits("1", "1Gi"), main: limits("2", "2Gi"),
			podLevel: &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")}},
			warning:  "since every container declares a cpu limit"},
		{name: "pod-level limits of both", init: limits("1", "1Gi"), side: limits("1", "1Gi"), main: limits("2", "2Gi"),
			podLevel: &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("4Gi")}}, reruns: true},
		{name: "pod-level memory limit, a container without cpu limit", init: limits("", "1Gi"), side: limits("1", "1Gi"), main: limits("2", "2Gi"),
			podLevel: &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")}}, reruns: true},
		{name: "pod-level requests only", init: limits("1", "1Gi"), side: limits("1", "1Gi"), main: limits("2", "2Gi"),
			podLevel: &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}},
			warning:  "since every container declares cpu and memory limits"},
		{name: "empty pod-level resources", init: limits("1", "1Gi"), side: limits("1", "1Gi"), main: limits("2", "2Gi"),
			podLevel: &corev1.ResourceRequirements{}, warning: "since every container declares cpu and memory limits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			always, never := corev1.ContainerRestartPolicyAlways, corev1.ContainerRestartPolicyNever
			pod := &corev1.Pod{}
			pod.Name = "p"
			pod.Spec.Resources = tc.podLevel
			pod.Spec.InitContainers = []corev1.Container{
				{Name: "a", Image: "registry.test/app:1", Command: []string{"/a"}, Resources: tc.init},
				{Name: "side", Image: "registry.test/app:1", Command: []string{"/side"}, RestartPolicy: &always, Resources: tc.side},
				{Name: "b", Image: "registry.test/app:1", Command: []string{"/b"}, Resources: tc.init},
			}
			pod.Spec.Containers = []corev1.Container{{Name: "main", Image: "registry.test/app:1", Command: []string{"/main"}, Resources: tc.main,
				RestartPolicy: &never, RestartPolicyRules: []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestartAllContainers,
					ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{88}}}}}}
			res, err := inj.MutatePod(context.Background(), pod)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, c := range res.Pod.Spec.InitContainers {
				names = append(names, c.Name)
			}
			want := []string{contract.InstallContainer, "a", "side", "b"}
			members := "side:sidecar,main:regular"
			if tc.reruns {
				want = []string{contract.InstallContainer, "a", "a-rerun", "side", "b", "b-rerun"}
				members = "a-rerun:init,side:sidecar,b-rerun:init,main:regular"
			}
			if !slices.Equal(names, want) {
				t.Errorf("init containers %q, want %q", names, want)
			}
			if got, _ := membersOf(res.Pod, &res.Pod.Spec.Containers[0]); got != members {
				t.Errorf("members %q, want %q", got, members)
			}
			if tc.warning == "" {
				if len(res.Warnings) != 0 {
					t.Errorf("warnings %q", res.Warnings)
				}
				return
			}
			w := `pod "p": init containers "a", "b" are not run again on a pod restart: a re-run sidecar would change the pod's QoS class or limits, ` + tc.warning + "; see docs/pod-level.md"
			if !slices.Equal(res.Warnings, []string{w}) {
				t.Errorf("warnings %q, want %q", res.Warnings, w)
			}
		})
	}
}

// TestRerunNameWarnings: a re-run sidecar whose name would be too long or
// is taken by any container of the pod, ephemeral ones included, is left
// out, with a warning naming the init container and why.
func TestRerunNameWarnings(t *testing.T) {
	inj, _ := goldenInjector(t)
	never := corev1.ContainerRestartPolicyNever
	long := strings.Repeat("x", maxContainerName-len(contract.InitRerunSuffix)+1)
	fits := strings.Repeat("y", maxContainerName-len(contract.InitRerunSuffix))
	pod := &corev1.Pod{}
	pod.Name, pod.Namespace = "p", "ns"
	pod.Spec.InitContainers = []corev1.Container{
		{Name: long, Image: "registry.test/app:1", Command: []string{"/a"}},
		{Name: fits, Image: "registry.test/app:1", Command: []string{"/a"}},
		{Name: "init-a", Image: "registry.test/app:1", Command: []string{"/a"}},
		{Name: "init-b", Image: "registry.test/app:1", Command: []string{"/b"}},
		{Name: "init-c", Image: "registry.test/app:1", Command: []string{"/c"}},
		{Name: "init-a-rerun", Image: "registry.test/app:1", Command: []string{"/a"}},
	}
	pod.Spec.Containers = []corev1.Container{{Name: "init-b-rerun", Image: "registry.test/app:1", Command: []string{"/main"},
		RestartPolicy: &never, RestartPolicyRules: []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestartAllContainers,
			ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{88}}}}}}
	pod.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "init-c-rerun", Image: "x"}}}
	res, err := inj.MutatePod(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`pod "ns/p": spec.initContainers[0]: init container "` + long + `" is not run again on a pod restart: the name of its re-run sidecar, "` + long + `-rerun", is longer than 63 characters`,
		`pod "ns/p": spec.initContainers[2]: init container "init-a" is not run again on a pod restart: the name of its re-run sidecar, "init-a-rerun", is taken by another container of the pod`,
		`pod "ns/p": spec.initContainers[3]: init container "init-b" is not run again on a pod restart: the name of its re-run sidecar, "init-b-rerun", is taken by another container of the pod`,
		`pod "ns/p": spec.initContainers[4]: init container "init-c" is not run again on a pod restart: the name of its re-run sidecar, "init-c-rerun", is taken by another container of the pod`,
	}
	if !slices.Equal(res.Warnings, want) {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(res.Warnings, "\n"), strings.Join(want, "\n"))
	}
	var names []string
	for _, c := range res.Pod.Spec.InitContainers {
		names = append(names, c.Name)
	}
	// init-a-rerun is the user's own init container, which gets its own.
	wantNames := []string{contract.InstallContainer, long, fits, fits + "-rerun", "init-a", "init-b", "init-c", "init-a-rerun", "init-a-rerun-rerun"}
	if !slices.Equal(names, wantNames) {
		t.Errorf("init containers %q, want %q", names, wantNames)
	}
}
