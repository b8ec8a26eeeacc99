// Package nodeagent owns the node agent of `restart-injector node-agent`: it
// makes the supervisors' in-place restarts visible to the cluster's tools.
// It reads the status documents in the state volumes of the pods on its node
// (Scan), maps pod UIDs to pods through an informer on its own node's pods,
// records an Event on the pod for each in-place restart (RestartedInPlace)
// and each pod-wide restart (PodRestartedInPlace), and serves Prometheus
// metrics computed from the documents (Collector); with Config.Groups it
// carries out group restarts (group.go). What it writes to the API is
// defined in package agentapi; `restart-injector status` reads it through
// package agentstatus.
//
// The supervisor stays free of network code: it only writes its status
// document; everything cluster-facing is here.
package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
)

// Config is what Run works with.
type Config struct {
	// Client talks to the API server.
	Client kubernetes.Interface
	// NodeName is the agent's node; only its pods are watched.
	NodeName string
	// PodsDir is the kubelet's pods directory.
	PodsDir string
	// Interval is the time between two scans of PodsDir.
	Interval time.Duration
	// MetricsListen is the TCP address of /metrics and /healthz; empty
	// serves none.
	MetricsListen string
	// Limits bound one scan; zero fields take DefaultLimits.
	Limits Limits
	// Log receives what the agent reports; nil is slog.Default().
	Log *slog.Logger
	// Annotate keeps contract.AnnotationRestarts on each pod with the
	// per-container counts, patched at most once per AnnotateEvery per pod
	// and only when they changed. It needs patch on pods.
	Annotate bool
	// AnnotateEvery is the least time between two patches of one pod; zero
	// is 10 s.
	AnnotateEvery time.Duration
	// Groups carries out group restarts (RestartGroup, group.go): it
	// needs Dynamic, write access to the pods' state volumes, and the
	// rights of deploy/components/node-agent-groups.
	Groups bool
	// Dynamic reads and writes the GroupRestart objects (Groups).
	Dynamic dynamic.Interface
	// GroupInterval is the time between two looks at the group members'
	// requests and rounds; zero is 200 ms.
	GroupInterval time.Duration
	// KeyNamespace is where the agent publishes the public key of its
	// Event signatures (signing.go): the agent's own namespace, where
	// `restart-injector status --agent-namespace` reads it. Empty is
	// agentapi.AgentNamespace.
	KeyNamespace string
	// Ready, if set, is called with the metrics address once the agent
	// serves and its informer has synced.
	Ready func(addr net.Addr)
}

// Agent is a running node agent.
type Agent struct {
	cfg      Config
	log      *slog.Logger
	pods     cache.Indexer
	recorder record.EventRecorder
	sink     *eventSink
	signer   *agentapi.Signer
	started  time.Time

	mu        sync.Mutex
	state     map[string]*podState  // pod UID → what the scans saw
	samples   map[string][]sample   // pod UID → its metrics as of its last scan
	annotated map[string]annotation // pod UID → the last patch
	errSeen   map[string]bool       // errors already logged, so a hostile file is reported once
	// groupSamples are the groups with members on this node as of the
	// group loop's last step (Config.Groups).
	groupSamples []groupSample
}

const podUIDIndex = "uid"

// ClientConfig returns a copy of cfg with the agent's bounds on its calls
// to the API server. client-go's default (5 a second, bursts of 10) is
// sized for a controller's occasional write; the group loop makes a
// generation, a report and two Events per round of each group with
// members on the node, and one group's calls must not queue behind
// another's. The calls themselves are bounded per group and step
// (group.go), so this is a ceiling, not a pace.
func ClientConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = 50, 100
	return c
}

// Run runs the agent until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Client == nil || cfg.NodeName == "" || cfg.PodsDir == "" {
		return errors.New("node agent: a client, the node name and the pods directory are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 2 * time.Second
	}
	cfg.Limits = cfg.Limits.withDefaults()
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.AnnotateEvery <= 0 {
		cfg.AnnotateEvery = 10 * time.Second
	}
	if cfg.GroupInterval <= 0 {
		cfg.GroupInterval = 200 * time.Millisecond
	}
	if cfg.KeyNamespace == "" {
		cfg.KeyNamespace = agentapi.AgentNamespace
	}
	if cfg.Groups && cfg.Dynamic == nil {
		return errors.New("node agent: group restarts need a dynamic client")
	}
	a := newAgent(cfg, time.Now())

	factory := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
		}))
	inf := factory.Core().V1().Pods().Informer()
	if err := inf.AddIndexers(cache.Indexers{podUIDIndex: func(obj any) ([]string, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			return []string{string(p.UID)}, nil
		}
		return nil, nil
	}}); err != nil {
		return err
	}
	a.pods = inf.GetIndexer()

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	a.sink.EventSink = &typedcorev1.EventSinkImpl{Interface: cfg.Client.CoreV1().Events("")}
	broadcaster.StartRecordingToSink(a.sink)
	defer broadcaster.Shutdown()
	a.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: agentapi.Component, Host: cfg.NodeName})
	go a.publishUntilDone(ctx)

	var srv *http.Server
	var ln net.Listener
	if cfg.MetricsListen != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(a)
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		var err error
		ln, err = net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			return fmt.Errorf("node agent: metrics: %w", err)
		}
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
	}

	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	if cfg.Groups {
		go a.groupLoop(ctx)
	}
	a.log.Info("node agent started", "node", cfg.NodeName, "podsDir", cfg.PodsDir, "interval", cfg.Interval)
	a.scan(ctx)
	if cfg.Ready != nil {
		var addr net.Addr
		if ln != nil {
			addr = ln.Addr()
		}
		cfg.Ready(addr)
	}
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			a.scan(ctx)
		}
	}
}

func newAgent(cfg Config, started time.Time) *Agent {
	return &Agent{cfg: cfg, log: cfg.Log, started: started, sink: newEventSink(cfg.NodeName), signer: agentapi.NewSigner(cfg.NodeName),
		state: map[string]*podState{}, samples: map[string][]sample{},
		annotated: map[string]annotation{}, errSeen: map[string]bool{}}
}

// scan reads the documents pod by pod, records Events for what changed
// since the last scan, replaces the pod's metrics and patches the
// annotations due. Only one pod's documents are held at a time.
func (a *Agent) scan(ctx context.Context) {
	var due []annotation
	visited := map[string]bool{}
	errs := ScanEach(a.cfg.PodsDir, a.cfg.Limits, func(p PodDocs) {
		visited[p.UID] = true
		if p.Skipped {
			return // its state and metrics stay as the last scan left them
		}
		if an, ok := a.observe(p); ok {
			due = append(due, an)
		}
	})
	a.mu.Lock()
	a.logErrors(errs)
	a.forget(visited)
	a.mu.Unlock()
	for _, p := range due {
		a.annotate(ctx, p)
	}
}

// observe takes in one pod's documents: diffPod's Events are recorded, the
// pod's state and metrics replaced, and the annotation patch due returned.
func (a *Agent) observe(p PodDocs) (annotation, bool) {
	pod := a.pod(p.UID)
	a.mu.Lock()
	defer a.mu.Unlock()
	if pod == nil {
		// Not (yet) in the informer, or gone from it: no series, Event
		// or generation an adversary can invent, and nothing kept.
		delete(a.samples, p.UID)
		delete(a.state, p.UID)
		delete(a.annotated, p.UID)
		return annotation{}, false
	}
	d := diffPod(a.state[p.UID], podInfoOf(pod, a.started), p.Docs, a.started)
	a.state[p.UID] = &d.state
	if len(d.samples) == 0 {
		delete(a.samples, p.UID)
	} else {
		a.samples[p.UID] = d.samples
	}
	for _, e := range d.events {
		a.record(pod, e)
	}
	if !a.cfg.Annotate || len(d.counts) == 0 {
		return annotation{}, false
	}
	b, _ := json.Marshal(d.counts) // sorted keys
	now := time.Now()
	prev, seen := a.annotated[p.UID]
	if string(b) == pod.Annotations[contract.AnnotationRestarts] || seen && (string(b) == prev.value || now.Sub(prev.at) < a.cfg.AnnotateEvery) {
		return annotation{}, false
	}
	an := annotation{namespace: pod.Namespace, name: pod.Name, uid: pod.UID, value: string(b), at: now}
	a.annotated[p.UID] = an
	return an, true
}

// record records e on pod, its structured values in the annotations.
func (a *Agent) record(pod *corev1.Pod, e event) {
	var ref *corev1.ObjectReference
	var msg string
	var ann map[string]string
	switch e.reason {
	case agentapi.ReasonRestarted:
		ref, msg, ann = containerRef(pod, e.container), e.restart.String(), e.restart.Annotations()
	case agentapi.ReasonPodRestarted:
		ref, msg, ann = podRef(pod), agentapi.PodRestartMessage(e.podGen), agentapi.PodRestartAnnotations(e.podGen)
	case agentapi.ReasonHandedOver:
		ref, msg, ann = containerRef(pod, e.container), e.handOver.String(), e.handOver.Annotations()
	default:
		return
	}
	ann = a.signer.Sign(e.reason, ref, ann)
	a.sink.remember(ref, msg, ann)
	for range e.times {
		a.recorder.AnnotatedEventf(ref, ann, corev1.EventTypeWarning, e.reason, "%s", msg)
	}
}

// maxRefusalLines bounds the lines one scan logs about refused state-volume
// entries, and maxErrSeen how many it remembers so as to log each once. A
// pod that renames a stream of bad files into its state volume names a new
// entry in every error, and logged one line per error (about 320 a second);
// now a scan logs at most maxRefusalLines of them and a count of the rest.
const (
	maxRefusalLines = 5
	maxErrSeen      = 10000
)

func (a *Agent) logErrors(errs []error) {
	logged, more := 0, 0
	for _, err := range errs {
		msg := err.Error()
		if a.errSeen[msg] {
			continue
		}
		if len(a.errSeen) < maxErrSeen {
			a.errSeen[msg] = true
		}
		if logged == maxRefusalLines {
			more++
			continue
		}
		logged++
		a.log.Warn("state volume entry refused", "error", msg)
	}
	if more > 0 {
		a.log.Warn("more state volume entries refused in this scan", "count", more)
	}
}

// forget drops the pods whose directories this scan did not find and the
// informer no longer has (their documents went with them), and the
// metrics of every pod without a directory.
func (a *Agent) forget(visited map[string]bool) {
	for uid := range a.samples {
		if !visited[uid] {
			delete(a.samples, uid)
		}
	}
	for uid := range a.state {
		if !visited[uid] && a.pod(uid) == nil {
			delete(a.state, uid)
			delete(a.annotated, uid)
		}
	}
}

// annotation is one patch of contract.AnnotationRestarts.
type annotation struct {
	namespace, name string
	uid             types.UID
	value           string
	at              time.Time
}

// annotate patches the pod's annotation; the UID precondition keeps it
// off a pod of the same name created since.
func (a *Agent) annotate(ctx context.Context, an annotation) {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         an.uid,
		"annotations": map[string]string{contract.AnnotationRestarts: an.value},
	}})
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := a.cfg.Client.CoreV1().Pods(an.namespace).Patch(ctx, an.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		a.log.Warn("annotate pod", "pod", an.namespace+"/"+an.name, "error", err)
		// Try again after AnnotateEvery.
		a.mu.Lock()
		if cur, ok := a.annotated[string(an.uid)]; ok && cur.value == an.value {
			cur.value = ""
			a.annotated[string(an.uid)] = cur
		}
		a.mu.Unlock()
	}
}

func containerRef(pod *corev1.Pod, container string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name,
		UID: pod.UID, ResourceVersion: pod.ResourceVersion, FieldPath: "spec.containers{" + container + "}"}
}

func podRef(pod *corev1.Pod) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name,
		UID: pod.UID, ResourceVersion: pod.ResourceVersion}
}

func (a *Agent) pod(uid string) *corev1.Pod {
	objs, err := a.pods.ByIndex(podUIDIndex, uid)
	if err != nil || len(objs) == 0 {
		return nil
	}
	p, _ := objs[0].(*corev1.Pod)
	return p
}

// The series' labels are kube-state-metrics' for the same objects
// (namespace, pod, uid, container: kube_pod_container_status_restarts_total
// and its kin), so that a query can join the two on them and tell two pods
// of one name apart (a StatefulSet's pod recreated).
var (
	descRestarts = prometheus.NewDesc("restart_supervisor_container_restarts_total",
		"In-place restarts of the container's workload by restart-supervisor (the kubelet's restartCount does not see them).",
		[]string{"namespace", "pod", "uid", "container"}, nil)
	descPodRestarts = prometheus.NewDesc("restart_supervisor_pod_restarts_total",
		"Pod-wide in-place restarts (RestartAllContainers) by restart-supervisor.",
		[]string{"namespace", "pod", "uid"}, nil)
	descLastExit = prometheus.NewDesc("restart_supervisor_container_last_exit_code",
		"Exit code of the workload's last exit (128+N for signal N).",
		[]string{"namespace", "pod", "uid", "container"}, nil)
	// As kube-state-metrics' kube_pod_container_status_last_terminated_reason:
	// 1 for the last exit's reason, only OOMKilled or Stalled (the
	// watchdog's), no series otherwise.
	descLastExitReason = prometheus.NewDesc("restart_supervisor_container_last_exit_reason",
		"1 for the reason of the workload's last exit, when it has one: OOMKilled, or Stalled (the watchdog stopped a run that made no progress).",
		[]string{"namespace", "pod", "uid", "container", "reason"}, nil)
	descBackoff = prometheus.NewDesc("restart_supervisor_container_in_backoff",
		"1 when the supervisor waits out a back-off before restarting the workload.",
		[]string{"namespace", "pod", "uid", "container"}, nil)
	// Every agent with members of a group serves its series, with the
	// same value (the GroupRestart object's generation): aggregate with
	// max by (namespace, group).
	descGroupRestarts = prometheus.NewDesc("restart_supervisor_group_restarts_total",
		"Group restarts (RestartGroup) of a group with members on this node: the generation of its GroupRestart object.",
		[]string{"namespace", "group"}, nil)
)

// Describe implements prometheus.Collector.
func (a *Agent) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRestarts
	ch <- descPodRestarts
	ch <- descLastExit
	ch <- descLastExitReason
	ch <- descBackoff
	ch <- descGroupRestarts
}

// Collect implements prometheus.Collector: the state of the last scan, so
// a scrape costs no file access and the values are the documents' own.
func (a *Agent) Collect(ch chan<- prometheus.Metric) {
	a.mu.Lock()
	var snap []sample
	for _, s := range a.samples {
		snap = append(snap, s...)
	}
	groups := a.groupSamples
	a.mu.Unlock()
	for _, m := range metricsOf(snap) {
		ch <- m
	}
	for _, g := range groups {
		ch <- prometheus.MustNewConstMetric(descGroupRestarts, prometheus.CounterValue, float64(g.generation), g.namespace, g.group)
	}
}

// metricsOf builds the series of the samples: per container its restarts,
// back-off and last exit (when it has exited), per pod its pod restarts.
func metricsOf(snap []sample) []prometheus.Metric {
	var out []prometheus.Metric
	type podKey struct{ namespace, pod, uid string }
	pods := map[podKey]uint64{}
	var order []podKey
	for _, s := range snap {
		out = append(out, prometheus.MustNewConstMetric(descRestarts, prometheus.CounterValue, float64(s.restarts), s.namespace, s.pod, s.uid, s.container))
		if s.lastExit != nil {
			out = append(out, prometheus.MustNewConstMetric(descLastExit, prometheus.GaugeValue, float64(*s.lastExit), s.namespace, s.pod, s.uid, s.container))
		}
		if s.lastReason != "" {
			out = append(out, prometheus.MustNewConstMetric(descLastExitReason, prometheus.GaugeValue, 1, s.namespace, s.pod, s.uid, s.container, s.lastReason))
		}
		b := 0.0
		if s.inBackoff {
			b = 1
		}
		out = append(out, prometheus.MustNewConstMetric(descBackoff, prometheus.GaugeValue, b, s.namespace, s.pod, s.uid, s.container))
		k := podKey{s.namespace, s.pod, s.uid}
		if _, ok := pods[k]; !ok {
			order = append(order, k)
		}
		pods[k] = max(pods[k], s.podRestarts)
	}
	for _, k := range order {
		out = append(out, prometheus.MustNewConstMetric(descPodRestarts, prometheus.CounterValue, float64(pods[k]), k.namespace, k.pod, k.uid))
	}
	return out
}
