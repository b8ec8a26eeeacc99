package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/restart-supervisor/restart-supervisor/test/e2e/cluster"
)

var jobSetResource = schema.GroupVersionResource{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"}

// jobSetWorkers is how many Jobs (one pod each) the scenario's JobSet runs.
const jobSetWorkers = 2

// jobSetDir builds (or finds cached) the JobSet controller, its CRD and its
// webhook configurations with hack/jobset.sh.
func jobSetDir(t *testing.T, repo string) string {
	t.Helper()
	return hackDir(t, repo, "JOBSET_DIR", "jobset.sh", "the JobSet controller")
}

// hackDir is the directory a build-and-cache script of hack/ prints last
// (hack/lib/cache.sh), or env's value where it is set; a script that
// fails makes the test unavailable.
func hackDir(t *testing.T, repo, env, script, what string) string {
	t.Helper()
	if d := os.Getenv(env); d != "" {
		return d
	}
	cmd := exec.Command("bash", filepath.Join(repo, "hack", script))
	cmd.Stderr = testWriter{t}
	out, err := cmd.Output()
	if err != nil {
		unavailable(t, "hack/%s (%s from the Go module proxy) failed: %v", script, what, err)
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// jobSetScenario: a JobSet, run by the JobSet controller (v0.12.0) the way
// training users run it, whose workers exit 42 once, a retriable error, and
// then finish. With the trainer's restart rule (Restart In [42]) each
// worker restarts in place, natively by the kubelet and supervised by the
// supervisor that the webhook's pod entry put there after its template
// entry carried the rules through the Job the JobSet controller created (an
// API server with the gate off drops them from the Job's template). The
// JobSet never restarts (failurePolicy.maxRestarts 0: a recreated Job would
// fail it) and completes.
func jobSetScenario(ctx context.Context, e *env, name string) result {
	js, err := jobSetObject(e, name)
	if err != nil {
		return result{err: err}
	}
	return runJobSet(ctx, e, name, js)
}

// jobSetOfflineScenario is jobSetScenario with the JobSet's manifest put
// through `restart-injector inject` before it is created, as a user without
// the webhook does (docs/injector.md): the pods the controller makes from
// the injected template run under the supervisor from their first start,
// and the webhook, where one is registered, leaves them as they are. The
// native run creates the manifest as written.
func jobSetOfflineScenario(ctx context.Context, e *env, name string) result {
	js, err := jobSetObject(e, name)
	if err != nil {
		return result{err: err}
	}
	if e.mode == native {
		return runJobSet(ctx, e, name, js)
	}
	in, err := yaml.Marshal(js.Object)
	if err != nil {
		return result{err: err}
	}
	dir, err := os.MkdirTemp("", "jobset-offline-")
	if err != nil {
		return result{err: err}
	}
	defer os.RemoveAll(dir)
	manifest := filepath.Join(dir, "jobset.yaml")
	if err := os.WriteFile(manifest, in, 0o600); err != nil {
		return result{err: err}
	}
	bin, err := e.c.InjectorBinary(e.repo)
	if err != nil {
		return result{err: err}
	}
	// Every container has a command: no registry lookup is needed (and
	// none is reachable).
	cmd := exec.CommandContext(ctx, bin, "inject", "-f", manifest, "--no-lookup", "--supervisor-image", cluster.SupervisorImage, "--delivery", e.delivery)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return result{err: fmt.Errorf("restart-injector inject: %v: %s", err, strings.TrimSpace(stderr.String()))}
	}
	var obj map[string]any
	if err := yaml.Unmarshal(out, &obj); err != nil {
		return result{err: fmt.Errorf("restart-injector inject wrote: %w", err)}
	}
	r := runJobSet(ctx, e, name, &unstructured.Unstructured{Object: obj})
	r.notes = append(r.notes, "inject: "+strings.ReplaceAll(strings.TrimSpace(stderr.String()), manifest, filepath.Base(manifest)))
	return r
}

// jobSetObject is the scenario's JobSet of jobSetWorkers workers.
func jobSetObject(e *env, name string) (*unstructured.Unstructured, error) {
	trainer := shell("trainer", `C=$POD_NAME; `+onceScript("exit 42", "exit 0"),
		policy(corev1.ContainerRestartPolicyNever), restartIn(42))
	trainer.Env = append(trainer.Env, corev1.EnvVar{Name: "POD_NAME",
		ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}})
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"e2e-pod": name}},
		Spec:       e.withVolumes(podSpec(corev1.RestartPolicyNever, 5, trainer), name),
	}
	if e.annotationCarrier() {
		// A release without the fields: the user writes the annotation.
		if err := cluster.RulesToAnnotation(&tmpl.ObjectMeta, &tmpl.Spec); err != nil {
			return nil, err
		}
	}
	template, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&tmpl)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "jobset.x-k8s.io/v1alpha2",
		"kind":       "JobSet",
		"metadata":   map[string]any{"name": name, "namespace": e.ns},
		"spec": map[string]any{
			"failurePolicy": map[string]any{"maxRestarts": int64(0)},
			"network":       map[string]any{"enableDNSHostnames": false},
			"replicatedJobs": []any{map[string]any{
				"name":     "workers",
				"replicas": int64(jobSetWorkers),
				"template": map[string]any{"spec": map[string]any{
					"parallelism":    int64(1),
					"completions":    int64(1),
					"backoffLimit":   int64(0),
					"completionMode": "Indexed",
					"template":       template,
				}},
			}},
		},
	}}, nil
}

// runJobSet creates js and waits for it to complete or fail.
func runJobSet(ctx context.Context, e *env, name string, js *unstructured.Unstructured) result {
	dyn, err := dynamic.NewForConfig(e.c.Config)
	if err != nil {
		return result{err: err}
	}
	jobsets := dyn.Resource(jobSetResource).Namespace(e.ns)
	if _, err := jobsets.Create(ctx, js, metav1.CreateOptions{}); err != nil {
		return result{err: fmt.Errorf("create JobSet: %w", err)}
	}
	var state string
	var restarts int64
	deadline := time.Now().Add(scenarioTimeout)
	for state == "" {
		got, err := jobsets.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return result{err: err}
		}
		restarts, _, _ = unstructured.NestedInt64(got.Object, "status", "restarts")
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if (m["type"] == "Completed" || m["type"] == "Failed") && m["status"] == "True" {
				state = m["type"].(string)
			}
		}
		if state == "" && time.Now().After(deadline) {
			return result{err: fmt.Errorf("JobSet %s: neither Completed nor Failed after %s (restarts %d)", name, scenarioTimeout, restarts)}
		}
		time.Sleep(300 * time.Millisecond)
	}
	pods, err := e.c.Client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "jobset.sigs.k8s.io/jobset-name=" + name})
	if err != nil {
		return result{err: err}
	}
	r := result{phase: "JobSet " + state, supRestarts: 0}
	restartedOnce, succeeded := 0, 0
	for i := range pods.Items {
		pod := &pods.Items[i]
		o := observe(pod, "trainer", e.containerLogs(ctx, pod, "trainer"), e.events(name, pod.Name))
		if o.starts == 2 && o.restarted {
			restartedOnce++
			if !r.restarted || o.latency > r.latency {
				r.restarted, r.latency = true, o.latency
			}
		}
		if pod.Status.Phase == corev1.PodSucceeded {
			succeeded++
		}
		r.kubeletRestarts += o.kubeletRestarts
		r.supRestarts += max(o.supervisorRestarts, 0)
	}
	if restartedOnce == jobSetWorkers && succeeded == jobSetWorkers && len(pods.Items) == jobSetWorkers {
		r.outcome = fmt.Sprintf("JobSet %s, restarts %d, %d pods Succeeded, each restarted once in place", state, restarts, succeeded)
	} else {
		r.outcome = fmt.Sprintf("JobSet %s, restarts %d, %d pods (%d Succeeded, %d restarted once)", state, restarts, len(pods.Items), succeeded, restartedOnce)
	}
	r.notes = append(r.notes, fmt.Sprintf("JobSet status.restarts %d", restarts))
	return r
}
