package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/test/e2e/cluster"
)

// The auto mode is the install a user makes: the release's own default
// gates, and every pod through the restart-injector webhook of deploy/ in
// --native=auto. The webhook wraps a pod or leaves it to the kubelet, per
// feature (webhook.NativeDetector); either way the outcome must be the
// newest release's. Its results go to docs/conformance-auto-<version>.md,
// beside the native and supervised runs' file, and into the matrix.

// admission is how the webhook admitted one pod.
type admission struct {
	name      string
	wrapped   bool // the injector's status annotation is on the stored pod
	annotated bool // the pod carries its rules in the restart-supervisor.dev/rules annotation
	// delivery is how a wrapped pod got the binaries: "copy" (the install
	// container), "image" (the binary volume is an image volume), or
	// "neither" (which no injection writes).
	delivery string
}

// deliveryOf tells how the stored pod got the supervisor's binaries.
func deliveryOf(pod *corev1.Pod) string {
	install := slices.ContainsFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == contract.InstallContainer })
	image := slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == contract.BinVolume && v.Image != nil })
	switch {
	case install && !image:
		return "copy"
	case image && !install:
		return "image"
	}
	return "neither"
}

// admissions records every pod of a namespace as the API server stored it
// on create.
type admissions struct {
	mu   sync.Mutex
	pods map[string]admission
}

// watchAdmissions records the pods of ns created from now until ctx ends.
// Each watch starts from a list, which is recorded too, so a watch the
// server closes or expires loses no pod that still exists.
func watchAdmissions(ctx context.Context, c *cluster.Cluster, ns string) (*admissions, error) {
	a := &admissions{pods: map[string]admission{}}
	pods := c.Client.CoreV1().Pods(ns)
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	go func() {
		for ctx.Err() == nil {
			if list == nil {
				if list, err = pods.List(ctx, metav1.ListOptions{}); err != nil {
					time.Sleep(time.Second)
					continue
				}
				for i := range list.Items {
					a.add(&list.Items[i])
				}
			}
			w, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
			list = nil
			if err != nil {
				time.Sleep(time.Second)
				continue
			}
			for ev := range w.ResultChan() {
				if pod, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Added {
					a.add(pod)
				}
			}
			w.Stop()
		}
	}()
	return a, nil
}

func (a *admissions) add(pod *corev1.Pod) {
	_, wrapped := pod.Annotations[contract.AnnotationStatus]
	_, annotated := pod.Annotations[contract.AnnotationRules]
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, seen := a.pods[pod.Name]; !seen {
		a.pods[pod.Name] = admission{name: pod.Name, wrapped: wrapped, annotated: annotated, delivery: deliveryOf(pod)}
	}
}

// of is the pods of the scenario run key: the pod key and those whose names
// start with key- (a Job's, a JobSet's, a scenario's second pod).
func (a *admissions) of(key string) []admission {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []admission
	for n, p := range a.pods {
		if n == key || strings.HasPrefix(n, key+"-") {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// choiceOf words what auto did with a scenario's pods.
func choiceOf(pods []admission) string {
	wrapped := 0
	for _, p := range pods {
		if p.wrapped {
			wrapped++
		}
	}
	switch {
	case len(pods) == 0:
		return "no pod seen"
	case wrapped == 0:
		return "native"
	case wrapped == len(pods):
		return "wrapped"
	}
	return fmt.Sprintf("wrapped %d of %d pods", wrapped, len(pods))
}

// anyWrapped reports whether the supervisor ran any of the pods.
func anyWrapped(pods []admission) bool {
	for _, p := range pods {
		if p.wrapped {
			return true
		}
	}
	return false
}

// autoChoiceError checks auto's choice for each pod against what the release
// honours with its default gates (cluster.RestartRulesDefault,
// cluster.RestartAllContainersDefault): from 1.35 a pod whose rules are in
// its fields is left to the kubelet, but on 1.35 one that uses
// RestartAllContainers, which is off there by default, is wrapped. A pod
// that carries the annotation is wrapped on every release (only this
// project reads it). Before 1.35 the gate is off by default, the API server
// drops the fields and auto must wrap every pod with rules, which the
// outcome shows: a pod left alone there would lose its rules.
//
// kubeletGates are gates set on the kubelet only: with
// RestartAllContainersOnContainerExits off there, the node declares no
// RestartAllContainers in status.declaredFeatures (NodeDeclaredFeatures,
// GA in 1.37; component-helpers nodedeclaredfeatures/features/
// restartallcontainers, v0.37.2) and a pod using it must be wrapped,
// whatever the release's defaults.
func autoChoiceError(s scenario, version string, kubeletGates []cluster.FeatureGate, pods []admission) error {
	if !cluster.RestartRulesDefault(version) {
		return nil
	}
	if len(pods) == 0 {
		return fmt.Errorf("no pod of the scenario was seen")
	}
	racOff := slices.Contains(kubeletGates, cluster.FeatureGate{Name: "RestartAllContainersOnContainerExits", On: false})
	for _, p := range pods {
		want := s.needsRestartAll && (!cluster.RestartAllContainersDefault(version) || racOff)
		why := "the release honours the restart rules"
		switch {
		case s.offline:
			want, why = true, "the manifest was injected offline"
		case p.annotated:
			want, why = true, "the pod carries the rules annotation"
		case want && racOff:
			why = "the kubelet runs with RestartAllContainersOnContainerExits=false and does not declare the feature"
		case want:
			why = "RestartAllContainers is off by default in " + version
		case s.needsRestartAll:
			why = "the release honours RestartAllContainers too"
		}
		if p.wrapped != want {
			return fmt.Errorf("pod %s: wrapped=%v, want %v (%s)", p.name, p.wrapped, want, why)
		}
	}
	return nil
}

// autoWant is the outcome expected of an auto run: the supervised one where
// the supervisor ran the pod, the native one where the kubelet did.
func autoWant(s scenario, pods []admission) string {
	if anyWrapped(pods) {
		return s.want[supervised]
	}
	return s.want[native]
}

// waitConclusion waits for the webhook's first --native=auto conclusion,
// so that no scenario pod meets the detector before its first check (it
// injects until then).
func waitConclusion(ctx context.Context, logPath string, timeout time.Duration) (concluded string, err error) {
	err = waitLogLine(ctx, logPath, "native restart rules", timeout, func() bool {
		concluded = webhookConclusion(logPath)
		return concluded != ""
	})
	return concluded, err
}

// waitDeliveryChoice waits for the webhook's first "image volumes" line
// (webhook.ImageVolumeDetector, --delivery=auto) in its log and returns
// the delivery it chose and why.
func waitDeliveryChoice(ctx context.Context, logPath string, timeout time.Duration) (delivery, reason string, err error) {
	err = waitLogLine(ctx, logPath, "image volumes", timeout, func() bool {
		delivery, reason = deliveryChoice(logPath)
		return delivery != ""
	})
	return delivery, reason, err
}

// waitLogLine polls found every 200 ms until it reports the webhook's
// msg line in logPath, ctx ends or timeout passes.
func waitLogLine(ctx context.Context, logPath, msg string, timeout time.Duration, found func() bool) error {
	deadline := time.Now().Add(timeout)
	for !found() {
		if time.Now().After(deadline) {
			return fmt.Errorf("no %q line in %s after %s", msg, logPath, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

// deliveryChoice is the delivery and reason of the webhook's first
// "image volumes" line in logPath; "" while there is none.
func deliveryChoice(logPath string) (delivery, reason string) {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return "", ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.Contains(l, `msg="image volumes"`) {
			continue
		}
		if d, r := deliveryChosen.FindStringSubmatch(l), nativeReason.FindStringSubmatch(l); d != nil && r != nil {
			return d[1], strings.ReplaceAll(r[1], `\"`, `"`)
		}
	}
	return "", ""
}

var deliveryChosen = regexp.MustCompile(`\bdelivery=(\w+)`)

// skewFile is the file of an auto run with a kubelet of an older release
// than the API server's (E2E_KUBELET_BIN_DIR), or with gates of its own
// (E2E_KUBELET_GATES): conformance-auto-<API server>-kubelet-<kubelet>.md,
// each such gate adding -<Name>-<true|false>.
func skewFile(docs, apiVersion, kubeletVersion string, kubeletGates []cluster.FeatureGate) string {
	name := "conformance-auto-" + apiVersion + "-kubelet-" + kubeletVersion
	for _, g := range kubeletGates {
		name += fmt.Sprintf("-%s-%v", g.Name, g.On)
	}
	return filepath.Join(docs, name+".md")
}

// older is the older of two releases "v1.N.M" by minor release: what a
// cluster of that API server and that kubelet honours with default gates.
func older(a, b string) string {
	if cluster.Minor(b) < cluster.Minor(a) {
		return b
	}
	return a
}

// autoFile is the per-release file of the auto run.
func autoFile(docs, version string) string {
	return filepath.Join(docs, "conformance-auto-"+version+".md")
}

// writeAuto renders docs/conformance-auto-<version>.md.
func (r *report) writeAuto(path string, list []scenario) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	b.WriteString("# Conformance: `--native=auto` at the release's default gates\n\n")
	b.WriteString("Generated by `go test ./test/e2e/ -run TestConformance -v` with `E2E_MODES` naming `auto` (see test/e2e); do not edit by hand. " +
		"The native and supervised runs of the release: [conformance-" + r.version + ".md](conformance-" + r.version + ".md); " +
		"the matrix of every release: [conformance.md](conformance.md).\n\n")
	release := r.version
	if len(r.kubeletGates) > 0 {
		release += fmt.Sprintf(" (kubelet with %s)", cluster.GateFlag(r.kubeletGates))
	}
	if r.apiVersion != r.version {
		release = fmt.Sprintf("%s control plane (etcd, kube-apiserver, kube-controller-manager) with a Kubernetes %s kubelet", r.apiVersion, r.version)
	}
	fmt.Fprintf(&b, "Last run: %s UTC, commit %s, %s/%s, Kubernetes %s (built from source), "+
		"%s.\n\n", r.started.UTC().Format("2006-01-02 15:04"), runCommit(), runtime.GOOS, runtime.GOARCH, release, r.runtimeLine())
	if len(r.kubeletGates) > 0 {
		fmt.Fprintf(&b, "The kubelet runs with `--feature-gates=%s` of its own, the rest of the cluster at the release's defaults: a node "+
			"whose operator turned a feature off while the control plane keeps it. A kubelet with RestartAllContainersOnContainerExits "+
			"off does not list it in `status.declaredFeatures` (NodeDeclaredFeatures, GA in 1.37), and the scheduler would keep a "+
			"native pod using the action Pending; `--native=auto` must judge by the declared features, not the version. The "+
			"choice is checked against that: every pod using `RestartAllContainers` wrapped.\n\n", cluster.GateFlag(r.kubeletGates))
	}
	if r.apiVersion != r.version {
		fmt.Fprintf(&b, "A node not yet upgraded: the API server is %s, the kubelet %s, as in the middle of an upgrade (a kubelet may be "+
			"up to three minor releases older than the API server). `--native=auto` must judge by the kubelet: the API server's "+
			"default gates keep what the kubelet may not act on. The choice is checked against the older of the two releases.\n\n",
			r.apiVersion, r.version)
	}
	b.WriteString("The cluster sets none of the restart-rules feature gates, so the release's defaults apply, as on a cluster whose " +
		"operator installed restart-injector and nothing else: every pod goes through the restart-injector webhook of deploy/ in " +
		"`--native=auto`, which wraps a pod (the supervisor applies its rules) or leaves it to the kubelet, for each feature the pod " +
		"uses. The outcome is compared with the supervised expectation where the pod was wrapped and the native one where it was not; " +
		"from 1.35 the choice itself is checked too: a pod with its rules in the fields is left to the kubelet, but on 1.35 one using " +
		"`RestartAllContainers` (off there by default) is wrapped, and a pod with the rules annotation is wrapped everywhere.\n\n")
	if r.autoDefaults != "" {
		fmt.Fprintf(&b, "- **`--native=auto` concluded**: %s.\n\n", r.autoDefaults)
	}
	fmt.Fprintf(&b, "Cluster bring-up %s, scenarios %s.\n\n", r.upTime[auto].Round(100*time.Millisecond), r.runTime[auto].Round(100*time.Millisecond))
	b.WriteString("| Scenario | Outcome (default gates, webhook in auto) | auto's choice | Expected outcome | Restart latency | kubelet restartCount | supervisor restarts | Notes |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, s := range list {
		res, ok := r.results[s.name][auto]
		choice, want, sup := "–", "–", "–"
		if ok {
			choice = res.choice
			want = autoWant(s, res.admitted)
			if res.err == nil {
				sup = fmtSup(res.supRestarts)
			}
		}
		fmt.Fprintf(&b, "| %s: %s | %s | %s | %s | %s | %d | %s | %s |\n", s.name, s.desc, cell(res, ok), choice, want,
			fmtLatency(res), res.kubeletRestarts, sup, strings.Join(res.notes, "; "))
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
