package apiserver_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/ptr"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/injector"
)

// resources is "cpu/memory" requests and limits; "" leaves one out.
func resources(reqCPU, reqMem, limCPU, limMem string) corev1.ResourceRequirements {
	list := func(cpu, mem string) corev1.ResourceList {
		rl := corev1.ResourceList{}
		if cpu != "" {
			rl[corev1.ResourceCPU] = resource.MustParse(cpu)
		}
		if mem != "" {
			rl[corev1.ResourceMemory] = resource.MustParse(mem)
		}
		if len(rl) == 0 {
			return nil
		}
		return rl
	}
	return corev1.ResourceRequirements{Requests: list(reqCPU, reqMem), Limits: list(limCPU, limMem)}
}

// rerunCase is a pod whose "trainer" restarts all containers (through the
// rules annotation, which every release's API server admits) and the
// number of re-run sidecars its injection adds.
type rerunCase struct {
	name     string
	podLevel *corev1.ResourceRequirements
	// init and containers: name → resources; a name starting with
	// "sidecar" is a native sidecar.
	init       []namedResources
	containers []namedResources
	reruns     int
}

type namedResources struct {
	name string
	res  corev1.ResourceRequirements
}

func (rc rerunCase) pod() *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: rc.name, Namespace: "default", Annotations: map[string]string{
		contract.AnnotationRules: `{"trainer": {"restartPolicy": "Never", "restartPolicyRules": [{"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [88]}}]}}`,
	}}}
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	p.Spec.Resources = rc.podLevel
	for _, c := range rc.init {
		ic := corev1.Container{Name: c.name, Image: "registry.test/app:1", Command: []string{"/" + c.name}, Resources: c.res}
		if strings.HasPrefix(c.name, "sidecar") {
			ic.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		}
		p.Spec.InitContainers = append(p.Spec.InitContainers, ic)
	}
	for _, c := range rc.containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c.name, Image: "registry.test/app:1", Command: []string{"/" + c.name}, Resources: c.res})
	}
	return p
}

// everyContainerLimits reports whether every container of pod, init
// containers and sidecars included, declares a non-zero limit of r: the
// kubelet sets the pod cgroup's limit of r only then (ResourceConfigForPod),
// and Guaranteed needs it for cpu and memory.
func everyContainerLimits(pod *corev1.Pod, r corev1.ResourceName) bool {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if q, ok := c.Resources.Limits[r]; !ok || q.IsZero() {
				return false
			}
		}
	}
	return true
}

// limitDeclared is the kubelet's rule for the pod cgroup's limit of r
// (ResourceConfigForPod, pkg/kubelet/cm/helpers_linux.go, v1.34.4): every
// container declares one, or the pod-level resources set one.
func limitDeclared(pod *corev1.Pod, r corev1.ResourceName) bool {
	if resourcehelper.IsPodLevelResourcesSet(pod) {
		if q, ok := pod.Spec.Resources.Limits[r]; ok && !q.IsZero() {
			return true
		}
	}
	return everyContainerLimits(pod, r)
}

// enforcedLimits are the pod cgroup's cpu and memory limits: PodLimits of
// each resource whose limit is declared.
func enforcedLimits(pod *corev1.Pod) corev1.ResourceList {
	out := corev1.ResourceList{}
	limits := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if limitDeclared(pod, r) {
			out[r] = limits[r]
		}
	}
	return out
}

func sameResources(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, q := range a {
		if p, ok := b[k]; !ok || q.Cmp(p) != 0 {
			return false
		}
	}
	return true
}

func formatResources(rl corev1.ResourceList) string {
	var parts []string
	for k, q := range rl {
		parts = append(parts, fmt.Sprintf("%s=%s", k, q.String()))
	}
	slices.Sort(parts)
	return "{" + strings.Join(parts, " ") + "}"
}

// TestRerunKeepsQoSAndResources creates, on a real kube-apiserver, each pod
// of a table as it is and as the injector writes it (with its re-run
// sidecars where it adds them), and compares what the API server made of
// both: status.qosClass, the effective requests (PodRequests), the limits
// the kubelet puts on the pod cgroup, and whether every container declares
// a cpu and a memory limit. Without the re-run sidecars, the injected pod's
// PodRequests and PodLimits are also those with them: a re-run sidecar adds
// nothing to either.
func TestRerunKeepsQoSAndResources(t *testing.T) {
	assets := kubeAssets(t)
	_, client := startAPIServer(t, assets, true)
	inj := injector.New(injector.Options{SupervisorImage: supervisorImage})
	three := []namedResources{{"fetch", corev1.ResourceRequirements{}}, {"sidecar-proxy", corev1.ResourceRequirements{}}}
	with := func(list []namedResources, res ...corev1.ResourceRequirements) []namedResources {
		out := slices.Clone(list)
		for i := range out {
			out[i].res = res[i]
		}
		return out
	}
	trainer := func(res corev1.ResourceRequirements) []namedResources { return []namedResources{{"trainer", res}} }
	cases := []rerunCase{
		{name: "besteffort", init: three, containers: trainer(corev1.ResourceRequirements{}), reruns: 1},
		{name: "burstable-requests", init: with(three, resources("200m", "128Mi", "", ""), resources("100m", "64Mi", "", "")),
			containers: trainer(resources("500m", "256Mi", "", "")), reruns: 1},
		{name: "burstable-some-limits", init: with(three, resources("200m", "128Mi", "1", "1Gi"), resources("100m", "64Mi", "", "128Mi")),
			containers: trainer(resources("500m", "256Mi", "2", "")), reruns: 1},
		{name: "burstable-every-limit", init: with(three, resources("200m", "128Mi", "1", "1Gi"), resources("100m", "64Mi", "200m", "128Mi")),
			containers: trainer(resources("500m", "256Mi", "2", "2Gi")), reruns: 0},
		{name: "memory-limits-only", init: with(three, resources("200m", "", "", "1Gi"), resources("100m", "", "", "128Mi")),
			containers: trainer(resources("500m", "", "", "2Gi")), reruns: 0},
		{name: "cpu-limits-only", init: with(three, resources("", "128Mi", "1", ""), resources("", "64Mi", "200m", "")),
			containers: trainer(resources("", "256Mi", "2", "")), reruns: 0},
		{name: "guaranteed", init: with(three, resources("1", "1Gi", "1", "1Gi"), resources("200m", "128Mi", "200m", "128Mi")),
			containers: trainer(resources("2", "2Gi", "2", "2Gi")), reruns: 0},
		{name: "pod-level", podLevel: &corev1.ResourceRequirements{Requests: resources("4", "4Gi", "", "").Requests, Limits: resources("", "", "4", "4Gi").Limits},
			init:       with(three, resources("1", "1Gi", "1", "1Gi"), resources("200m", "128Mi", "200m", "128Mi")),
			containers: trainer(resources("2", "2Gi", "2", "2Gi")), reruns: 1},
		{name: "pod-level-burstable", podLevel: &corev1.ResourceRequirements{Requests: resources("2", "2Gi", "", "").Requests},
			init: three, containers: trainer(resources("1", "1Gi", "", "")), reruns: 1},
		// Pod-level requests alone leave the pod cgroup's limits to the
		// containers, which all declare them.
		{name: "pod-level-requests-every-limit", podLevel: &corev1.ResourceRequirements{Requests: resources("2", "2Gi", "", "").Requests},
			init:       with(three, resources("200m", "128Mi", "1", "1Gi"), resources("100m", "64Mi", "200m", "128Mi")),
			containers: trainer(resources("500m", "256Mi", "2", "2Gi")), reruns: 0},
		{name: "pod-level-memory-limit", podLevel: &corev1.ResourceRequirements{Limits: resources("", "", "", "4Gi").Limits},
			init:       with(three, resources("200m", "128Mi", "", "1Gi"), resources("100m", "64Mi", "200m", "128Mi")),
			containers: trainer(resources("500m", "256Mi", "2", "2Gi")), reruns: 1},
		{name: "interleaved", init: []namedResources{
			{"fetch", resources("500m", "512Mi", "1", "1Gi")},
			{"sidecar-proxy", resources("100m", "", "", "128Mi")},
			{"rendezvous", resources("100m", "64Mi", "500m", "")},
			{"sidecar-logs", corev1.ResourceRequirements{}},
			{"warm", resources("50m", "32Mi", "", "")},
			{"sidecar-metrics", resources("50m", "32Mi", "50m", "32Mi")},
		}, containers: []namedResources{{"trainer", resources("1", "1Gi", "", "")}, {"worker", resources("500m", "256Mi", "1", "512Mi")}}, reruns: 3},
	}
	seen := map[corev1.PodQOSClass]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			pods := client.CoreV1().Pods("default")
			orig := tc.pod()
			res, err := inj.MutatePod(ctx, orig)
			if err != nil {
				t.Fatal(err)
			}
			res.Pod.Name = orig.Name + "-injected"
			var reruns []string
			for _, c := range res.Pod.Spec.InitContainers {
				if strings.HasSuffix(c.Name, contract.InitRerunSuffix) {
					reruns = append(reruns, c.Name)
				}
			}
			if len(reruns) != tc.reruns {
				t.Fatalf("re-run sidecars %q, want %d (warnings %q)", reruns, tc.reruns, res.Warnings)
			}
			if tc.reruns == 0 && (len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "a re-run sidecar would change the pod's QoS class or limits")) {
				t.Errorf("no re-run sidecar, warnings %q", res.Warnings)
			}
			before, err := pods.Create(ctx, orig, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create the original pod: %v", err)
			}
			after, err := pods.Create(ctx, res.Pod, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create the injected pod: %v", err)
			}
			if before.Status.QOSClass == "" || before.Status.QOSClass != after.Status.QOSClass {
				t.Errorf("QoS class %q became %q", before.Status.QOSClass, after.Status.QOSClass)
			}
			seen[before.Status.QOSClass] = true
			opts := resourcehelper.PodResourcesOptions{}
			if b, a := resourcehelper.PodRequests(before, opts), resourcehelper.PodRequests(after, opts); !sameResources(b, a) {
				t.Errorf("effective requests %s became %s", formatResources(b), formatResources(a))
			}
			if b, a := enforcedLimits(before), enforcedLimits(after); !sameResources(b, a) {
				t.Errorf("pod cgroup limits %s became %s", formatResources(b), formatResources(a))
			}
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				if b, a := limitDeclared(before, r), limitDeclared(after, r); b != a {
					t.Errorf("the pod cgroup's %s limit is declared: %v became %v", r, b, a)
				}
				// A pod-level limit takes the place of the containers'.
				if before.Spec.Resources != nil && !before.Spec.Resources.Limits.Name(r, resource.DecimalSI).IsZero() {
					continue
				}
				if b, a := everyContainerLimits(before, r), everyContainerLimits(after, r); b != a {
					t.Errorf("every container declares a %s limit: %v became %v", r, b, a)
				}
			}
			// The re-run sidecars alone: the injected pod without them
			// has the same requests and limits.
			without := after.DeepCopy()
			without.Spec.InitContainers = slices.DeleteFunc(without.Spec.InitContainers, func(c corev1.Container) bool {
				return slices.Contains(reruns, c.Name)
			})
			if b, a := resourcehelper.PodRequests(without, opts), resourcehelper.PodRequests(after, opts); !sameResources(b, a) {
				t.Errorf("re-run sidecars change PodRequests from %s to %s", formatResources(b), formatResources(a))
			}
			if b, a := resourcehelper.PodLimits(without, opts), resourcehelper.PodLimits(after, opts); !sameResources(b, a) {
				t.Errorf("re-run sidecars change PodLimits from %s to %s", formatResources(b), formatResources(a))
			}
			t.Logf("%s: %d re-run sidecars, QoS %s, requests %s, pod cgroup limits %s", tc.name, len(reruns), after.Status.QOSClass,
				formatResources(resourcehelper.PodRequests(after, opts)), formatResources(enforcedLimits(after)))
		})
	}
	for _, c := range []corev1.PodQOSClass{corev1.PodQOSBestEffort, corev1.PodQOSBurstable, corev1.PodQOSGuaranteed} {
		if !seen[c] {
			t.Errorf("no case of QoS class %s", c)
		}
	}
}

// TestRerunUnderResourceQuota pins down what docs/pod-level.md says of
// namespaces whose ResourceQuota covers cpu or memory: the API server's
// quota admission requires a request from every container of a pod without
// pod-level resources, so it refuses a pod with a re-run sidecar, naming
// it; with pod-level requests it admits the pod.
func TestRerunUnderResourceQuota(t *testing.T) {
	assets := kubeAssets(t)
	_, client := startAPIServer(t, assets, true)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "quota"}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hard := corev1.ResourceList{corev1.ResourceRequestsCPU: resource.MustParse("10"), corev1.ResourceRequestsMemory: resource.MustParse("10Gi")}
	q, err := client.CoreV1().ResourceQuotas("quota").Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "compute"},
		Spec: corev1.ResourceQuotaSpec{Hard: hard}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// What the quota controller, which this control plane lacks, writes.
	q.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: corev1.ResourceList{corev1.ResourceRequestsCPU: resource.MustParse("0"), corev1.ResourceRequestsMemory: resource.MustParse("0")}}
	if _, err := client.CoreV1().ResourceQuotas("quota").UpdateStatus(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	inj := injector.New(injector.Options{SupervisorImage: supervisorImage})
	requests := resources("100m", "64Mi", "", "")
	tc := rerunCase{name: "requests", init: []namedResources{{"fetch", requests}, {"sidecar-proxy", requests}},
		containers: []namedResources{{"trainer", requests}}}
	create := func(pod *corev1.Pod) error {
		pod.Namespace = "quota"
		res, err := inj.MutatePod(ctx, pod)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.CoreV1().Pods("quota").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("the original pod %s: %v", pod.Name, err)
		}
		res.Pod.Name += "-injected"
		_, err = client.CoreV1().Pods("quota").Create(ctx, res.Pod, metav1.CreateOptions{})
		return err
	}
	err = create(tc.pod())
	if want := "must specify requests.cpu for: fetch-rerun; requests.memory for: fetch-rerun"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("injected pod under a quota: %v; want an error with %q", err, want)
	}
	tc.name, tc.podLevel = "pod-level", &corev1.ResourceRequirements{Requests: resources("1", "1Gi", "", "").Requests}
	if err := create(tc.pod()); err != nil {
		t.Errorf("injected pod with pod-level requests under a quota: %v", err)
	}
}

// TestRerunUnderLimitRange pins down the other caveat of
// docs/pod-level.md: a LimitRange's defaults go to every container without
// resources of its own when the pod is created, the re-run sidecar of an
// injected manifest included, whose requests then count in the pod's.
func TestRerunUnderLimitRange(t *testing.T) {
	assets := kubeAssets(t)
	_, client := startAPIServer(t, assets, true)
	ctx := context.Background()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "limits"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	def := resources("100m", "64Mi", "200m", "128Mi")
	if _, err := client.CoreV1().LimitRanges("limits").Create(ctx, &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "defaults"},
		Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{Type: corev1.LimitTypeContainer, DefaultRequest: def.Requests, Default: def.Limits}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tc := rerunCase{name: "defaults", init: []namedResources{{"fetch", resources("100m", "64Mi", "", "")}},
		containers: []namedResources{{"trainer", resources("100m", "64Mi", "", "")}}}
	pod := tc.pod()
	pod.Namespace = "limits"
	res, err := injector.New(injector.Options{SupervisorImage: supervisorImage}).MutatePod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	created, err := client.CoreV1().Pods("limits").Create(ctx, res.Pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range created.Spec.InitContainers {
		if c.Name != "fetch"+contract.InitRerunSuffix {
			continue
		}
		if !sameResources(c.Resources.Requests, def.Requests) || !sameResources(c.Resources.Limits, def.Limits) {
			t.Errorf("%s: requests %s, limits %s; want the LimitRange's defaults", c.Name, formatResources(c.Resources.Requests), formatResources(c.Resources.Limits))
		}
		return
	}
	t.Fatalf("no fetch-rerun in %+v", created.Spec.InitContainers)
}
