package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/injector"
)

// manyMembersPod is a pod of n containers with commands, the first of which
// restarts the whole pod on exit code 88: every container is a member.
func manyMembersPod(n int) []byte { return manyMembersPodNamed(n, "member") }

func manyMembersPodNamed(n int, prefix string) []byte {
	pod := corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		// Every member with its readiness probe, the largest patch a
		// member makes (a Never pod gets none by the injector's rule).
		ObjectMeta: metav1.ObjectMeta{Name: "many", Namespace: "apps",
			Annotations: map[string]string{contract.AnnotationReadiness: contract.ReadinessOn}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever},
	}
	never := corev1.ContainerRestartPolicyNever
	for i := range n {
		c := corev1.Container{Name: fmt.Sprintf("%s-%05d", prefix, i), Image: "example.test/app:1", Command: []string{"/app"}}
		if i == 0 {
			c.RestartPolicy = &never
			c.RestartPolicyRules = []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestartAllContainers,
				ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{88}}}}
		}
		pod.Spec.Containers = append(pod.Spec.Containers, c)
	}
	raw, _ := json.Marshal(pod)
	return raw
}

// allocated is the bytes the process allocated while f ran (the test's
// client, the server and the review): an upper bound of the review's peak.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// H1: every member of a RestartAllContainers pod carried the whole member
// list, so the patch grew with the square of the containers (2000
// containers: a 100 MB patch, a webhook of 423–487 MiB). The list is now
// one annotation each member reads through a fieldRef, a pod of more than
// contract.MaxPodMembers members is denied, and the patch is capped.
func TestRestartAllPodPatchLinear(t *testing.T) {
	h := &Handler{Mutator: injector.New(injector.Options{SupervisorImage: "example.test/restart-supervisor:test"}),
		Entrypoint: EntrypointDeny, Native: NativeOff}
	ts := startServer(t, h)

	// Under the cap: admitted with a patch of a few hundred bytes per
	// member, whatever the number of members.
	var perMember [2]float64
	for k, n := range []int{250, 800} {
		raw := manyMembersPod(n)
		review := reviewOf(t, raw, "Pod", "pods", "CREATE")
		var resp = new(struct{ patch int })
		used := allocated(func() {
			r := admit(t, ts, review)
			if !r.Allowed {
				t.Fatalf("%d members: denied: %+v", n, r.Result)
			}
			resp.patch = len(r.Patch)
			_, pod := applyPatch(t, raw, r)
			if got := len(strings.Split(pod.Annotations[contract.AnnotationPodMembers], ",")); got != n {
				t.Errorf("%d members: the annotation lists %d", n, got)
			}
		})
		perMember[k] = float64(resp.patch) / float64(n)
		t.Logf("%d members: review %d bytes, patch %d bytes (%.0f per member), %d MiB allocated", n, len(review), resp.patch, perMember[k], used>>20)
		if resp.patch > MaxPatchBytes {
			t.Errorf("%d members: patch of %d bytes, over MaxPatchBytes", n, resp.patch)
		}
	}
	if perMember[1] > 1.2*perMember[0] {
		t.Errorf("patch per member grows with the members: %.0f bytes at 250, %.0f at 800", perMember[0], perMember[1])
	}

	// Over the cap: a denial naming the cap, with bounded work.
	raw := manyMembersPod(2000)
	review := reviewOf(t, raw, "Pod", "pods", "CREATE")
	used := allocated(func() {
		r := admit(t, ts, review)
		want := fmt.Sprintf("2000 containers take part in pod restarts (RestartAllContainers), at most %d may", contract.MaxPodMembers)
		if r.Allowed || !strings.Contains(r.Result.Message, want) {
			t.Errorf("2000 members: want a denial with %q, got allowed=%v %+v", want, r.Allowed, r.Result)
		}
		if len(r.Result.Message) > 512 {
			t.Errorf("denial of %d bytes", len(r.Result.Message))
		}
	})
	t.Logf("2000 members: review %d bytes, denied, %d MiB allocated", len(review), used>>20)
	if used > 64<<20 {
		t.Errorf("a review of 2000 members allocated %d MiB", used>>20)
	}
}

// The last bound: a pod within every other cap whose patch would still
// pass MaxPatchBytes (1000 members of 62-character names) is denied with
// the bound in the message, before the patch is encoded whole.
func TestPatchBound(t *testing.T) {
	h := &Handler{Mutator: injector.New(injector.Options{SupervisorImage: "example.test/restart-supervisor:test"}),
		Entrypoint: EntrypointDeny, Native: NativeOff}
	ts := startServer(t, h)
	review := reviewOf(t, manyMembersPodNamed(1000, "m"+strings.Repeat("x", 55)), "Pod", "pods", "CREATE")
	var r *admissionv1.AdmissionResponse
	used := allocated(func() { r = admit(t, ts, review) })
	want := fmt.Sprintf("the injection's JSON patch would exceed %d bytes (containers 1000, init containers 0)", MaxPatchBytes)
	if r.Allowed || r.Result.Code != 422 || !strings.Contains(r.Result.Message, want) {
		t.Errorf("want a denial with %q, got allowed=%v patch %d bytes, %+v", want, r.Allowed, len(r.Patch), r.Result)
	}
	t.Logf("review %d bytes, denied: %d MiB allocated; %s", len(review), used>>20, r.Result.Message)
}

func TestEncodePatch(t *testing.T) {
	ops := []injector.PatchOp{{Op: "add", Path: "/a", Value: "<&>"}, {Op: "add", Path: "/b", Value: strings.Repeat("x", 100)}}
	b, err := encodePatch(ops, 1<<10)
	if err != nil || string(b) != `[{"op":"add","path":"/a","value":"<&>"},{"op":"add","path":"/b","value":"`+strings.Repeat("x", 100)+`"}]` {
		t.Errorf("%s, %v", b, err)
	}
	if _, err := encodePatch(ops, len(b)-1); !errors.Is(err, errPatchTooLarge) {
		t.Errorf("one byte under: %v", err)
	}
	if _, err := encodePatch(ops, len(b)); err != nil {
		t.Errorf("exactly at the bound: %v", err)
	}
}

// The warning of a workload whose rules go into its template annotation
// listed every ruled container: one line per object, whatever it holds.
func TestTemplateWarningBounded(t *testing.T) {
	h := newHandler()
	ts := startServer(t, h)
	var b strings.Builder
	b.WriteString("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: shop}\nspec:\n  template:\n    spec:\n      restartPolicy: Always\n      containers:\n")
	for i := range 300 {
		fmt.Fprintf(&b, "      - {name: c%03d-%s, image: x, restartPolicy: Never, restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [3]}}]}\n", i, strings.Repeat("n", 50))
	}
	_, body := workloadReview(t, b.String(), deploymentGVK, "deployments")
	resp := admit(t, ts, body)
	if !resp.Allowed || len(resp.Warnings) != 1 {
		t.Fatalf("%+v", resp.Result)
	}
	if w := resp.Warnings[0]; len(w) > 1024 || !strings.Contains(w, "and 292 more") {
		t.Errorf("warning of %d bytes: %.200s", len(w), w)
	}
}

// A warning per container (here: command set, so the entrypoint
// annotation is ignored) made as many warnings as containers.
func TestPodWarningsBounded(t *testing.T) {
	h := &Handler{Mutator: injector.New(injector.Options{SupervisorImage: "example.test/restart-supervisor:test"}),
		Entrypoint: EntrypointDeny, Native: NativeOff}
	ts := startServer(t, h)
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: apps\n  annotations:\n")
	for i := range 40 {
		fmt.Fprintf(&b, "    restart-supervisor.dev/entrypoint.c%d: '[\"/x\"]'\n", i)
	}
	b.WriteString("spec:\n  restartPolicy: Never\n  containers:\n")
	for i := range 40 {
		fmt.Fprintf(&b, "  - {name: c%d, image: x, command: [/app], restartPolicy: Never, restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [3]}}]}\n", i)
	}
	resp := admit(t, ts, podReview(t, b.String()))
	if !resp.Allowed {
		t.Fatalf("%+v", resp.Result)
	}
	if len(resp.Warnings) != maxWarnings+1 || resp.Warnings[maxWarnings] != "and 32 more warnings" {
		t.Errorf("%d warnings: %q", len(resp.Warnings), resp.Warnings)
	}
}
