// Package nodeagent owns the node agent of `restart-injector node-agent`: it
// makes the supervisors' in-place restarts visible to the cluster's tools.
// It reads the status documents in the state volumes of the pods on its node
// (Scan), maps pod UIDs to pods through an informer on its own node's pods,
// records an Event on the pod for each in-place restart (RestartedInPlace)
// and each pod-wide restart (PodRestartedInPlace), and serves Prometheus
// metrics computed from the documents (Collector).
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
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/podstate"
	"github.com/restart-supervisor/restart-supervisor/supervise"
)

// Event reasons the agent records, and `restart-injector status` reads.
const (
	ReasonRestarted    = "RestartedInPlace"
	ReasonPodRestarted = "PodRestartedInPlace"
	// Component is the Events' source.component.
	Component = "restart-supervisor-node-agent"
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
	started  time.Time

	mu         sync.Mutex
	containers map[containerKey]*containerCount
	podGens    map[string]uint64 // pod UID → highest generation seen
	snapshot   []sample
	annotated  map[string]annotation // pod UID → the last patch
	errSeen    map[string]bool       // errors already logged, so a hostile file is reported once
}

type containerKey struct{ uid, container string }

// containerCount keeps a container's restart counter monotonic across its
// supervisors: the kubelet restarting the container starts a new supervisor
// whose document counts from 0 again. base is what the previous
// supervisors counted; a document whose count went down belongs to a new
// supervisor, and the last count seen is added to base.
type containerCount struct {
	base, last int
	seen       bool
}

// sample is one container's metrics as of the last scan.
type sample struct {
	namespace, pod, container string
	restarts                  int
	podRestarts               uint64
	lastExit                  *int32
	inBackoff                 bool
}

const podUIDIndex = "uid"

// Run runs the agent until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Client == nil || cfg.NodeName == "" || cfg.PodsDir == "" {
		return errors.New("node agent: a client, the node name and the pods directory are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 2 * time.Second
	}
	if cfg.Limits == (Limits{}) {
		cfg.Limits = DefaultLimits
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.AnnotateEvery <= 0 {
		cfg.AnnotateEvery = 10 * time.Second
	}
	a := &Agent{cfg: cfg, log: cfg.Log, started: time.Now(),
		containers: map[containerKey]*containerCount{}, podGens: map[string]uint64{}, errSeen: map[string]bool{},
		annotated: map[string]annotation{}}

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
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cfg.Client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	a.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Component, Host: cfg.NodeName})

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

// scan reads the documents, records Events for what changed since the last
// scan and replaces the metrics snapshot.
func (a *Agent) scan(ctx context.Context) {
	docs, errs := Scan(a.cfg.PodsDir, a.cfg.Limits)
	a.mu.Lock()
	patches := a.update(docs, errs)
	a.mu.Unlock()
	for _, p := range patches {
		a.annotate(ctx, p)
	}
}

// update takes in one scan's documents, records the Events, replaces the
// snapshot and returns the annotation patches due.
func (a *Agent) update(docs []Doc, errs []error) []annotation {
	for _, err := range errs {
		if msg := err.Error(); !a.errSeen[msg] {
			if len(a.errSeen) < 10000 {
				a.errSeen[msg] = true
			}
			a.log.Warn("state volume entry refused", "error", msg)
		}
	}
	var snap []sample
	live := map[containerKey]bool{}
	livePods := map[string]bool{}
	podGen := map[string]uint64{}
	pods := map[string]*corev1.Pod{}
	valid := docs[:0:0]
	for _, d := range docs {
		pod := a.pod(d.PodUID)
		if pod == nil || !hasContainer(pod, d.Container) {
			// Not (yet) in the informer, or a document under a name that
			// is none of the pod's containers: no series, Event or
			// generation an adversary can invent.
			continue
		}
		pods[d.PodUID] = pod
		valid = append(valid, d)
		podGen[d.PodUID] = max(podGen[d.PodUID], d.Generation)
	}
	for _, d := range valid {
		pod := pods[d.PodUID]
		k := containerKey{d.PodUID, d.Container}
		live[k] = true
		livePods[d.PodUID] = true
		c := a.containers[k]
		if c == nil {
			c = &containerCount{}
			a.containers[k] = c
		}
		prev := c.base + c.last
		if c.seen && d.Restarts < c.last {
			c.base += c.last // a new supervisor counts from 0
		}
		c.last = d.Restarts
		total := c.base + c.last
		switch {
		case !c.seen:
			// First sight. A pod created after this agent started has had
			// no other agent: all its restarts are new (the first one, at
			// back-off 0, often comes before the informer or a scan has
			// seen the pod). Otherwise (the agent restarted) past restarts
			// were reported by the agent that saw them, and only a restart
			// after this agent started is new.
			switch {
			case a.createdSinceStart(pod) && d.Restarts > 0:
				a.restartEvents(pod, d, d.Restarts, total)
			case d.LastRestart != nil && d.LastRestart.At.After(a.started) && d.Restarts > 0:
				a.restartEvents(pod, d, 1, total)
			}
		case total > prev:
			a.restartEvents(pod, d, total-prev, total)
		}
		c.seen = true
		s := sample{namespace: pod.Namespace, pod: pod.Name, container: d.Container,
			restarts: total, podRestarts: podGen[d.PodUID], inBackoff: d.State == supervise.BackingOff}
		if d.LastExit != nil {
			code := d.LastExit.Code
			s.lastExit = &code
		}
		snap = append(snap, s)
	}
	for uid := range livePods {
		// A pod first seen (or first seen by a restarted agent) sets the
		// baseline: the documents do not date a generation.
		g, seen := a.podGens[uid]
		pod := a.pod(uid)
		if pg := podGen[uid]; seen && pg > g || !seen && pg > 0 && a.createdSinceStart(pod) {
			// (A pod created after this agent started: every
			// generation is new, as for container restarts above.)
			a.podEvent(pod, pg-g, pg)
		}
		a.podGens[uid] = max(g, podGen[uid])
	}
	// Forget pods gone from the node (their documents went with them).
	for k := range a.containers {
		if !live[k] && a.pod(k.uid) == nil {
			delete(a.containers, k)
			delete(a.podGens, k.uid)
			delete(a.annotated, k.uid)
		}
	}
	a.snapshot = snap
	if !a.cfg.Annotate {
		return nil
	}
	counts := map[string]map[string]int{}
	for _, d := range docs {
		k := containerKey{d.PodUID, d.Container}
		if c := a.containers[k]; live[k] && c != nil {
			if counts[d.PodUID] == nil {
				counts[d.PodUID] = map[string]int{}
			}
			counts[d.PodUID][d.Container] = c.base + c.last
		}
	}
	var due []annotation
	now := time.Now()
	for uid, c := range counts {
		pod := a.pod(uid)
		b, _ := json.Marshal(c) // sorted keys
		prev, seen := a.annotated[uid]
		if string(b) == pod.Annotations[contract.AnnotationRestarts] || seen && (string(b) == prev.value || now.Sub(prev.at) < a.cfg.AnnotateEvery) {
			continue
		}
		an := annotation{namespace: pod.Namespace, name: pod.Name, uid: pod.UID, value: string(b), at: now}
		a.annotated[uid] = an
		due = append(due, an)
	}
	return due
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

// maxEventsPerScan bounds the Events one container can make the agent
// record in one scan, whatever its document claims; the correlator
// aggregates and rate-limits them further.
const maxEventsPerScan = 25

func (a *Agent) restartEvents(pod *corev1.Pod, d Doc, n, total int) {
	ref := containerRef(pod, d.Container)
	msg := restartOf(d.Status, total).String()
	for i := 0; i < min(n, maxEventsPerScan); i++ {
		a.recorder.Event(ref, corev1.EventTypeWarning, ReasonRestarted, msg)
	}
}

func (a *Agent) podEvent(pod *corev1.Pod, n, gen uint64) {
	if pod == nil {
		return
	}
	msg := fmt.Sprintf(podRestartFormat, gen)
	for i := uint64(0); i < min(n, maxEventsPerScan); i++ {
		a.recorder.Event(pod, corev1.EventTypeWarning, ReasonPodRestarted, msg)
	}
}

// createdSinceStart reports whether pod was created after this agent
// started. The API server stores creationTimestamp in whole seconds, so a
// pod created in the second the agent started counts as created after it:
// taking it for older would drop its first restarts (they come within a
// second at back-off 0, before a scan sees the pod), where the other error,
// a pod created in that same second just before a restarted agent came up,
// at worst repeats Events its previous agent recorded.
func (a *Agent) createdSinceStart(pod *corev1.Pod) bool {
	return !pod.CreationTimestamp.Time.Before(a.started.Truncate(time.Second))
}

func containerRef(pod *corev1.Pod, container string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name,
		UID: pod.UID, ResourceVersion: pod.ResourceVersion, FieldPath: "spec.containers{" + container + "}"}
}

func (a *Agent) pod(uid string) *corev1.Pod {
	objs, err := a.pods.ByIndex(podUIDIndex, uid)
	if err != nil || len(objs) == 0 {
		return nil
	}
	p, _ := objs[0].(*corev1.Pod)
	return p
}

func hasContainer(pod *corev1.Pod, name string) bool {
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			return true
		}
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return true
		}
	}
	return false
}

var (
	descRestarts = prometheus.NewDesc("restart_supervisor_container_restarts_total",
		"In-place restarts of the container's workload by restart-supervisor (the kubelet's restartCount does not see them).",
		[]string{"namespace", "pod", "container"}, nil)
	descPodRestarts = prometheus.NewDesc("restart_supervisor_pod_restarts_total",
		"Pod-wide in-place restarts (RestartAllContainers) by restart-supervisor.",
		[]string{"namespace", "pod"}, nil)
	descLastExit = prometheus.NewDesc("restart_supervisor_container_last_exit_code",
		"Exit code of the workload's last exit (128+N for signal N).",
		[]string{"namespace", "pod", "container"}, nil)
	descBackoff = prometheus.NewDesc("restart_supervisor_container_in_backoff",
		"1 when the supervisor waits out a back-off before restarting the workload.",
		[]string{"namespace", "pod", "container"}, nil)
)

// Describe implements prometheus.Collector.
func (a *Agent) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRestarts
	ch <- descPodRestarts
	ch <- descLastExit
	ch <- descBackoff
}

// Collect implements prometheus.Collector: the state of the last scan, so
// a scrape costs no file access and the values are the documents' own.
func (a *Agent) Collect(ch chan<- prometheus.Metric) {
	a.mu.Lock()
	snap := a.snapshot
	a.mu.Unlock()
	pods := map[[2]string]uint64{}
	for _, s := range snap {
		ch <- prometheus.MustNewConstMetric(descRestarts, prometheus.CounterValue, float64(s.restarts), s.namespace, s.pod, s.container)
		if s.lastExit != nil {
			ch <- prometheus.MustNewConstMetric(descLastExit, prometheus.GaugeValue, float64(*s.lastExit), s.namespace, s.pod, s.container)
		}
		b := 0.0
		if s.inBackoff {
			b = 1
		}
		ch <- prometheus.MustNewConstMetric(descBackoff, prometheus.GaugeValue, b, s.namespace, s.pod, s.container)
		k := [2]string{s.namespace, s.pod}
		pods[k] = max(pods[k], s.podRestarts)
	}
	for k, n := range pods {
		ch <- prometheus.MustNewConstMetric(descPodRestarts, prometheus.CounterValue, float64(n), k[0], k[1])
	}
}

// Restart is what one RestartedInPlace Event says.
type Restart struct {
	Container string
	Total     int    // in-place restarts of the container so far
	Exit      string // "exit code 1", "exit code 137 (SIGKILL)"
	Rule      string // "rule 0 (Restart)", "no rule (container policy)"
	Backoff   string // "back-off 10s"
}

// restartOf describes the restart s reports.
func restartOf(s podstate.Status, total int) Restart {
	r := Restart{Container: s.Container, Total: total, Exit: "exit unknown", Rule: "no rule (container policy)"}
	if e := s.LastRestart; e != nil {
		r.Exit = fmt.Sprintf("exit code %d", e.Code)
		if e.Signal != "" {
			r.Exit += " (" + e.Signal + ")"
		}
		if e.Rule != nil {
			r.Rule = fmt.Sprintf("rule %d (%s)", *e.Rule, e.Action)
		}
	}
	var d time.Duration
	if !s.NextStartAt.IsZero() && s.State == supervise.BackingOff {
		d = max(0, s.NextStartAt.Sub(s.UpdatedAt)).Round(time.Second)
	}
	r.Backoff = "back-off " + d.String()
	return r
}

// podRestartFormat is the PodRestartedInPlace message.
const podRestartFormat = "Pod restarted in place (RestartAllContainers): pod restart %d"

const combinedPrefix = "(combined from similar events): "

// String is the Event message.
func (r Restart) String() string {
	return fmt.Sprintf("Container %s restarted in place (restart %d): %s, %s, %s", r.Container, r.Total, r.Exit, r.Rule, r.Backoff)
}

// ParseRestart reads a RestartedInPlace message back, aggregated by the
// Event correlator ("(combined from similar events): ...") or not.
func ParseRestart(msg string) (Restart, bool) {
	var r Restart
	head, tail, ok := strings.Cut(strings.TrimPrefix(msg, combinedPrefix), "): ")
	if !ok {
		return r, false
	}
	if _, err := fmt.Sscanf(head, "Container %s restarted in place (restart %d", &r.Container, &r.Total); err != nil {
		return r, false
	}
	parts := strings.Split(tail, ", ")
	if len(parts) != 3 {
		return r, false
	}
	r.Exit, r.Rule, r.Backoff = parts[0], parts[1], parts[2]
	return r, true
}
