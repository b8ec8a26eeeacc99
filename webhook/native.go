package webhook

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/restart-supervisor/restart-supervisor/rules"
)

// MinNativeKubelet is the first kubelet release with ContainerRestartRules on
// by default (beta in 1.35).
var MinNativeKubelet = version.MustParseGeneric("1.35.0")

// MinNativeRestartAllKubelet is the first kubelet release with
// RestartAllContainersOnContainerExits on by default (alpha and off in
// 1.35, beta and on in 1.36: pkg/features/kube_features.go, v1.36.3).
var MinNativeRestartAllKubelet = version.MustParseGeneric("1.36.0")

// DeclaredRestartAllContainers is the name a node lists in
// status.declaredFeatures when its kubelet runs with
// RestartAllContainersOnContainerExits on (NodeDeclaredFeatures, beta and on
// in 1.36, GA in 1.37: k8s.io/component-helpers nodedeclaredfeatures/features/
// restartallcontainers, v0.37.2). The scheduler keeps a pod using the action
// off a node that does not declare it.
const DeclaredRestartAllContainers = "RestartAllContainersOnContainerExits"

// knownBadKubelets are native releases that act wrongly on pods the
// restart rules are written for, each with the release that fixed it:
// their kubelets count as not honouring the rules, so such pods run under
// the supervisor, which restarts without the kubelet.
var knownBadKubelets = []struct {
	from, fixed *version.Version
	why         string
}{
	// kubernetes#136910: after a kubelet restart, crashed regular
	// containers of a pod whose sidecar has a startup probe are never
	// restarted (restartCount stays 0); fixed by #137146, cherry-picked
	// into v1.35.4 (pkg/kubelet/prober/worker.go seeds the sidecar's
	// startup result; absent in v1.35.3, present in v1.35.4 and v1.36.0).
	{version.MustParseGeneric("1.35.0"), version.MustParseGeneric("1.35.4"), "kubernetes#136910, fixed in v1.35.4"},
}

// NativeFeature is one of the upstream features a pod's restart rules may
// rely on. --native=auto decides for each: a 1.35 cluster honours
// restartPolicyRules but not, by default, the RestartAllContainers action.
type NativeFeature int

const (
	// FeatureRestartRules is KEP-5307: container restartPolicy and
	// restartPolicyRules with the Restart action.
	FeatureRestartRules NativeFeature = iota
	// FeatureRestartAllContainers is KEP-5532: the RestartAllContainers
	// action.
	FeatureRestartAllContainers
)

// NativeProbePodName names the pod the detector creates with dryRun=All; it
// is never stored.
const NativeProbePodName = "restart-injector-native-probe"

// NativeDetector finds out whether the cluster honours restartPolicyRules by
// itself: the API server keeps the fields (checked with a server-side dry-run
// create, which runs the real defaulting, validation and field dropping
// without storing anything) and every node runs a kubelet that acts on them.
// Until the first check succeeds the answer is "no", so pods are injected:
// injecting on a cluster that would also have honoured the fields is safe,
// the opposite is not.
type NativeDetector struct {
	Client    kubernetes.Interface
	Namespace string // where the probe pod is dry-run created; the webhook's own
	Log       *slog.Logger
	Metrics   *Metrics
	// OnConclusion, when set, is called after every check that succeeded
	// (a SelfNarrower's Apply through NarrowOnConclusion).
	OnConclusion func(ctx context.Context, rulesOK, allOK bool, why string)

	honoured    atomic.Bool // FeatureRestartRules
	honouredAll atomic.Bool // FeatureRestartAllContainers
	// kept: 0 unknown, 1 dropped, 2 kept.
	kept atomic.Int32
	// keptAll: the same for the RestartAllContainers action (1 also when
	// the API server refuses it).
	keptAll atomic.Int32
	// server is the API server's rules.KubeVersion; 0 until known.
	server atomic.Int32
	// lastWhy is the last conclusion logged (Update's goroutine only).
	lastWhy string
}

// ValidationVersion is the Kubernetes release whose validation the webhook
// applies to restart fields: the API server's own while it keeps (and so
// validates) them, so that a pod is refused with the words that server
// would use; the newest while it drops them (gate off), since such a server
// has no verdict on them and the supervisor implements the newest release.
func (d *NativeDetector) ValidationVersion() rules.KubeVersion {
	if kept, known := d.FieldsKept(); known && kept && d.server.Load() != 0 {
		return rules.KubeVersion(d.server.Load())
	}
	return rules.NewestKube
}

// ValidationVersionFor is ValidationVersion for a pod relying on feature f.
// A pod using the RestartAllContainers action on an API server that refuses
// or drops the action (1.35 with its default gates, 1.34) is always wrapped
// and its fields removed, so that server never validates them: it is
// validated like the newest release, whose behaviour the supervisor gives
// it. Validated like the server's own release, 1.35 would refuse the very
// action the supervisor is there to provide (validateContainerRestartPolicy
// allows it only with opts.AllowRestartAllContainers, the gate:
// pkg/apis/core/validation/validation.go, v1.35.4).
func (d *NativeDetector) ValidationVersionFor(f NativeFeature) rules.KubeVersion {
	// Until the action's check has answered (keptAll 0: CheckAll stores it
	// after the fields' own check and one more API call), it is treated as
	// refused, as ValidationVersion treats fields of unknown fate.
	if f == FeatureRestartAllContainers && d.keptAll.Load() != 2 {
		return rules.NewestKube
	}
	return d.ValidationVersion()
}

// readServerVersion asks discovery for the API server's version.
func (d *NativeDetector) readServerVersion() {
	info, err := d.Client.Discovery().ServerVersion()
	if err == nil {
		var v rules.KubeVersion
		if v, err = rules.ServerKubeVersion(info.GitVersion); err == nil {
			if old := d.server.Swap(int32(v)); old != int32(v) {
				d.log().Info("API server version", "gitVersion", info.GitVersion, "validatesLike", v.String())
			}
			return
		}
	}
	d.log().Warn("API server version unknown; restart fields are validated like Kubernetes "+rules.NewestKube.String(), "err", err)
}

// FieldsKept reports whether the API server was last seen keeping
// restartPolicyRules.
func (d *NativeDetector) FieldsKept() (kept, known bool) {
	k := d.kept.Load()
	return k == 2, k != 0
}

// Honoured reports the latest conclusion for FeatureRestartRules.
func (d *NativeDetector) Honoured() bool { return d.honoured.Load() }

// HonouredFor reports the latest conclusion for feature f.
func (d *NativeDetector) HonouredFor(f NativeFeature) bool {
	if f == FeatureRestartAllContainers {
		return d.honouredAll.Load()
	}
	return d.honoured.Load()
}

// Update checks once and takes the conclusion in, keeping the previous
// one when the check fails: a transient API error must not flip a cluster
// between injecting and not. The self-narrowing (OnConclusion) follows
// each conclusion.
func (d *NativeDetector) Update(ctx context.Context) {
	ok, okAll, why, err := d.CheckAll(ctx)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		d.log().Warn("native restart rules: check failed; keeping previous conclusion", "honoured", d.Honoured(), "err", err)
		return
	}
	d.honoured.Store(ok)
	d.honouredAll.Store(okAll)
	if d.Metrics != nil {
		d.Metrics.NativeHonoured.Set(map[bool]float64{false: 0, true: 1}[ok])
	}
	if why != d.lastWhy {
		d.log().Info("native restart rules", "honoured", ok, "reason", why)
		d.lastWhy = why
	}
	if d.OnConclusion != nil {
		d.OnConclusion(ctx, ok, okAll, why)
	}
}

// repeatEvery calls check now and then every interval (five minutes when
// zero or less) until ctx is done: the loop of the cluster detectors.
func repeatEvery(ctx context.Context, interval time.Duration, check func()) {
	if interval <= 0 {
		interval = 5 * time.Minute
	}
	for {
		check()
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

func (d *NativeDetector) log() *slog.Logger {
	if d.Log == nil {
		return slog.Default()
	}
	return d.Log
}

// Check performs the checks once. honoured is about FeatureRestartRules;
// why also says what was concluded for FeatureRestartAllContainers, which
// CheckAll returns too.
func (d *NativeDetector) Check(ctx context.Context) (honoured bool, why string, err error) {
	honoured, _, why, err = d.CheckAll(ctx)
	return honoured, why, err
}

// CheckAll performs the checks once and concludes for both features: the
// restart fields are honoured when the API server keeps them and every
// kubelet is MinNativeKubelet or newer; the RestartAllContainers action
// when the API server also accepts and keeps it (a 1.35 server with its
// gate off refuses it), every kubelet is MinNativeRestartAllKubelet or
// newer and every node declares DeclaredRestartAllContainers. Kubelets of
// a knownBadKubelets range honour neither. A cluster in the middle of an
// upgrade is judged by its oldest kubelet, so a pod never lands on a node
// that would ignore its rules.
func (d *NativeDetector) CheckAll(ctx context.Context) (rulesOK, allOK bool, why string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	kept, err := d.apiServerKeepsFields(ctx, NativeProbePod(d.Namespace))
	if err != nil {
		return false, false, "", err
	}
	d.readServerVersion()
	d.kept.Store(map[bool]int32{false: 1, true: 2}[kept])
	if !kept {
		d.keptAll.Store(1)
		return false, false, "the API server drops restartPolicyRules (ContainerRestartRules gate off or server older than 1.34)", nil
	}
	keptAll, err := d.apiServerKeepsFields(ctx, NativeProbePodRestartAll(d.Namespace))
	if err != nil {
		return false, false, "", err
	}
	d.keptAll.Store(map[bool]int32{false: 1, true: 2}[keptAll])
	nodes, err := d.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, false, "", fmt.Errorf("list nodes: %w", err)
	}
	if len(nodes.Items) == 0 {
		return false, false, "the API server keeps restartPolicyRules but there are no nodes to check", nil
	}
	old := olderKubelets(nodes.Items, MinNativeKubelet)
	if len(old) > 0 {
		return false, false, fmt.Sprintf("the API server keeps restartPolicyRules but kubelets older than %s run on %s", MinNativeKubelet, strings.Join(old, ", ")), nil
	}
	for _, bad := range knownBadKubelets {
		if on := kubeletsBetween(nodes.Items, bad.from, bad.fixed); len(on) > 0 {
			return false, false, fmt.Sprintf("the API server keeps restartPolicyRules but kubelets %s to before %s (%s) run on %s", bad.from, bad.fixed, bad.why, strings.Join(on, ", ")), nil
		}
	}
	why = fmt.Sprintf("the API server keeps restartPolicyRules and all %d kubelets are %s or newer", len(nodes.Items), MinNativeKubelet)
	oldAll, missing := olderKubelets(nodes.Items, MinNativeRestartAllKubelet), undeclared(nodes.Items)
	switch {
	case !keptAll:
		why += "; the API server refuses or drops the RestartAllContainers action (RestartAllContainersOnContainerExits off), so pods using it are injected"
	case len(oldAll) > 0:
		why += fmt.Sprintf("; kubelets older than %s run on %s, so pods using RestartAllContainers are injected", MinNativeRestartAllKubelet, strings.Join(oldAll, ", "))
	case len(missing) > 0:
		// A 1.36+ kubelet with the gate off runs the pod as if the rules
		// had no RestartAllContainers, and with NodeDeclaredFeatures on
		// the scheduler keeps it Pending; judged by version alone it
		// would be left to the cluster. A node that declares nothing at
		// all (NodeDeclaredFeatures off on a 1.36 kubelet) cannot be told
		// apart from one with the gate off, and counts as lacking it:
		// wrapping a pod that did not need it is safe, the opposite not.
		why += fmt.Sprintf("; nodes %s do not declare %s in status.declaredFeatures, so pods using RestartAllContainers are injected", strings.Join(missing, ", "), DeclaredRestartAllContainers)
	default:
		why += fmt.Sprintf("; RestartAllContainers too (all kubelets %s or newer)", MinNativeRestartAllKubelet)
		allOK = true
	}
	return true, allOK, why, nil
}

// olderKubelets names the nodes (at most five, then a count) whose kubelet
// is older than min or does not say its version.
func olderKubelets(nodes []corev1.Node, min *version.Version) []string {
	return nodesWhere(nodes, func(n *corev1.Node) bool {
		v, err := version.ParseGeneric(n.Status.NodeInfo.KubeletVersion)
		return err != nil || v.LessThan(min)
	})
}

// kubeletsBetween names the nodes (at most five, then a count) whose
// kubelet is from or newer and older than before.
func kubeletsBetween(nodes []corev1.Node, from, before *version.Version) []string {
	return nodesWhere(nodes, func(n *corev1.Node) bool {
		v, err := version.ParseGeneric(n.Status.NodeInfo.KubeletVersion)
		return err == nil && v.AtLeast(from) && v.LessThan(before)
	})
}

// undeclared names the nodes (at most five, then a count) that do not list
// DeclaredRestartAllContainers in status.declaredFeatures.
func undeclared(nodes []corev1.Node) []string {
	return nodesWhere(nodes, func(n *corev1.Node) bool {
		return !slices.Contains(n.Status.DeclaredFeatures, DeclaredRestartAllContainers)
	})
}

func nodesWhere(nodes []corev1.Node, match func(*corev1.Node) bool) []string {
	return listNodes(nodes, match, func(n *corev1.Node) string { return n.Status.NodeInfo.KubeletVersion })
}

// listNodes names the nodes (at most five, then a count) that match, each
// with what label says of it in parentheses.
func listNodes(nodes []corev1.Node, match func(*corev1.Node) bool, label func(*corev1.Node) string) []string {
	var names []string
	for i := range nodes {
		if match(&nodes[i]) {
			names = append(names, fmt.Sprintf("%s (%s)", nodes[i].Name, label(&nodes[i])))
		}
	}
	if len(names) > 5 {
		names = append(names[:5], fmt.Sprintf("and %d more", len(names)-5))
	}
	return names
}

// apiServerKeepsFields dry-run creates pod and reports whether the API
// server kept the restart fields of its first container. A pod refused as
// invalid (an action that server's validation does not accept) counts as
// not kept.
func (d *NativeDetector) apiServerKeepsFields(ctx context.Context, pod *corev1.Pod) (bool, error) {
	got, err := d.Client.CoreV1().Pods(d.Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if apierrors.IsInvalid(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("dry-run create of pod %s/%s: %w", d.Namespace, pod.Name, err)
	}
	for _, c := range got.Spec.Containers {
		if len(c.RestartPolicyRules) > 0 && c.RestartPolicy != nil && c.RestartPolicyRules[0].Action == pod.Spec.Containers[0].RestartPolicyRules[0].Action {
			return true, nil
		}
	}
	return false, nil
}

// NativeProbePod is the pod the detector dry-run creates: one container
// with a restart rule, compliant with the restricted Pod Security profile so
// that it is judged on its restart fields alone.
func NativeProbePod(namespace string) *corev1.Pod {
	never := corev1.ContainerRestartPolicyNever
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: NativeProbePodName, Namespace: namespace},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:          "probe",
				Image:         "registry.k8s.io/pause:3.10",
				RestartPolicy: &never,
				RestartPolicyRules: []corev1.ContainerRestartRule{{
					Action: corev1.ContainerRestartRuleActionRestart,
					ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{
						Operator: corev1.ContainerRestartRuleOnExitCodesOpIn,
						Values:   []int32{42},
					},
				}},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}

// NativeProbePodRestartAll is NativeProbePod with the RestartAllContainers
// action.
func NativeProbePodRestartAll(namespace string) *corev1.Pod {
	p := NativeProbePod(namespace)
	p.Spec.Containers[0].RestartPolicyRules[0].Action = corev1.ContainerRestartRuleActionRestartAllContainers
	return p
}
