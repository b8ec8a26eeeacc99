package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/restart-supervisor/restart-supervisor/test/e2e/cluster"
)

// Markers the workloads record. Each run appends "START <uptime>" and,
// just before it exits, "EXIT <uptime>" to /events/<container>, a host
// directory the test reads directly (it runs as root on the node). The file
// outlives container restarts and the pod in both modes, unlike the logs of
// dead containers, which the kubelet removes after the next death;
// /proc/uptime gives centiseconds where the API's startedAt/finishedAt give
// seconds.
const (
	markStart = "START"
	markExit  = "EXIT"
	// markStop is a stop signal's arrival, recorded by a trap.
	markStop = "STOP"
)

// markFn defines mark(), which records an event for container $C.
const markFn = `mark() { read up _ < /proc/uptime; echo "$1 $up" >> /events/$C; echo "RS-E2E-$1"; }; `

func policy(p corev1.ContainerRestartPolicy) *corev1.ContainerRestartPolicy { return &p }

func rule(action corev1.ContainerRestartRuleAction, op corev1.ContainerRestartRuleOnExitCodesOperator, codes ...int32) corev1.ContainerRestartRule {
	return corev1.ContainerRestartRule{Action: action, ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: op, Values: codes}}
}

var (
	restartIn = func(codes ...int32) corev1.ContainerRestartRule {
		return rule(corev1.ContainerRestartRuleActionRestart, corev1.ContainerRestartRuleOnExitCodesOpIn, codes...)
	}
	restartNotIn = func(codes ...int32) corev1.ContainerRestartRule {
		return rule(corev1.ContainerRestartRuleActionRestart, corev1.ContainerRestartRuleOnExitCodesOpNotIn, codes...)
	}
)

// shell is a busybox container running script under sh -c, with mark()
// defined.
func shell(name, script string, p *corev1.ContainerRestartPolicy, rules ...corev1.ContainerRestartRule) corev1.Container {
	return corev1.Container{
		Name:               name,
		Image:              cluster.BusyboxImage,
		ImagePullPolicy:    corev1.PullNever,
		Command:            []string{"sh", "-c", "C=" + name + "; " + markFn + script},
		RestartPolicy:      p,
		RestartPolicyRules: rules,
	}
}

// podSpec pins the pod to the node (no scheduler), on the host network (no
// CNI needed) and without a service-account token (no token controller).
func podSpec(podPolicy corev1.RestartPolicy, grace int64, containers ...corev1.Container) corev1.PodSpec {
	no := false
	return corev1.PodSpec{
		NodeName:                      cluster.NodeName,
		HostNetwork:                   true,
		AutomountServiceAccountToken:  &no,
		RestartPolicy:                 podPolicy,
		TerminationGracePeriodSeconds: &grace,
		Containers:                    containers,
	}
}

// withVolumes mounts, in every container, an emptyDir at /data (the marker
// files that make a workload behave differently after its first run) and
// the node directory Dir/events/key at /events (the events files, which
// must outlive the pod: the kubelet removes a terminal pod's emptyDirs).
func (e *env) withVolumes(spec corev1.PodSpec, key string) corev1.PodSpec {
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	spec.Volumes = append(spec.Volumes,
		corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.Volume{Name: "events", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: e.eventsDir(key), Type: &dirOrCreate}}})
	for i := range spec.Containers {
		spec.Containers[i].VolumeMounts = append(spec.Containers[i].VolumeMounts,
			corev1.VolumeMount{Name: "data", MountPath: "/data"},
			corev1.VolumeMount{Name: "events", MountPath: "/events"})
	}
	return spec
}

// emptyDirFile reads a file of a pod's emptyDir volume where the kubelet
// keeps it on the node; "" when it cannot.
func (e *env) emptyDirFile(pod *corev1.Pod, volume, file string) string {
	b, err := os.ReadFile(filepath.Join(e.c.KubeletRoot(), "pods", string(pod.UID), "volumes", "kubernetes.io~empty-dir", volume, file))
	if err != nil {
		return ""
	}
	return string(b)
}

func (e *env) eventsDir(key string) string { return filepath.Join(e.c.Dir, "events", key) }

// exitScript records a start, then an exit, then exits with code.
func exitScript(code int) string {
	return fmt.Sprintf("mark %s; sleep 0.2; mark %s; exit %d", markStart, markExit, code)
}

// onceScript runs first on the first start and then on every later start
// (a marker file in /data tells them apart).
func onceScript(first, then string) string {
	return fmt.Sprintf("mark %s; if [ -e /data/$C.ran ]; then %s; fi; touch /data/$C.ran; sleep 0.2; mark %s; %s",
		markStart, then, markExit, first)
}

// event is one line of a container's events file.
type event struct {
	kind string
	at   time.Duration // since boot
}

// events reads the events file of a container of the pod (or Job) key.
func (e *env) events(key, container string) []event {
	b, err := os.ReadFile(filepath.Join(e.eventsDir(key), container))
	if err != nil {
		return nil
	}
	var out []event
	for _, l := range strings.Split(string(b), "\n") {
		kind, up, ok := strings.Cut(strings.TrimSpace(l), " ")
		if !ok {
			continue
		}
		secs, err := strconv.ParseFloat(up, 64)
		if err != nil {
			continue
		}
		out = append(out, event{kind, time.Duration(secs * float64(time.Second))})
	}
	return out
}

// uptime is the host's /proc/uptime, the clock of the events files.
func uptime() time.Duration {
	b, _ := os.ReadFile("/proc/uptime")
	f, _, _ := strings.Cut(string(b), " ")
	secs, _ := strconv.ParseFloat(f, 64)
	return time.Duration(secs * float64(time.Second))
}

// logLine is one container log line with its CRI timestamp.
type logLine struct {
	at   time.Time
	text string
}

func (e *env) logs(ctx context.Context, pod, container string, previous bool) []logLine {
	raw, err := e.c.Client.CoreV1().Pods(e.ns).GetLogs(pod, &corev1.PodLogOptions{
		Container: container, Previous: previous, Timestamps: true,
	}).DoRaw(ctx)
	if err != nil {
		return nil
	}
	var out []logLine
	s := bufio.NewScanner(strings.NewReader(string(raw)))
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		ts, text, ok := strings.Cut(s.Text(), " ")
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue
		}
		out = append(out, logLine{at, text})
	}
	return out
}

// containerLogs returns the previous run's log (when the kubelet restarted
// the container) followed by the current one, in time order.
func (e *env) containerLogs(ctx context.Context, pod *corev1.Pod, container string) []logLine {
	var lines []logLine
	if cs := containerStatus(pod, container); cs != nil && cs.RestartCount > 0 {
		lines = append(lines, e.logs(ctx, pod.Name, container, true)...)
	}
	lines = append(lines, e.logs(ctx, pod.Name, container, false)...)
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].at.Before(lines[j].at) })
	return lines
}

func containerStatus(pod *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == name {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// observation is what the logs and the status say about one container.
type observation struct {
	kubeletRestarts    int32
	supervisorRestarts int             // highest "restarts" the supervisor logged; -1 if it logged nothing
	starts, exits      int             // workload markers seen
	restarted          bool            // a start marker followed an exit marker
	latency            time.Duration   // of the first restart
	latencies          []time.Duration // of every restart, in order
	held               bool            // the supervisor holds the container idle
	lastIsExit         bool
}

// counted reports whether the kubelet's restartCount and the supervisor's
// log account for every restart the workload recorded.
func (o observation) counted() bool {
	return int(o.kubeletRestarts)+max(o.supervisorRestarts, 0) >= len(o.latencies)
}

var restartsAttr = regexp.MustCompile(`"?restarts"?[=:]"?(\d+)`)

func observe(pod *corev1.Pod, container string, lines []logLine, evs []event) observation {
	o := observation{supervisorRestarts: -1}
	if cs := containerStatus(pod, container); cs != nil {
		o.kubeletRestarts = cs.RestartCount
	}
	lastExit := time.Duration(-1)
	for _, ev := range evs {
		switch ev.kind {
		case markStart:
			o.starts++
			o.lastIsExit = false
			if lastExit >= 0 {
				o.latencies = append(o.latencies, ev.at-lastExit)
				if !o.restarted {
					o.restarted = true
					o.latency = ev.at - lastExit
				}
				lastExit = -1
			}
		case markExit:
			o.exits++
			o.lastIsExit = true
			lastExit = ev.at
		}
	}
	for _, l := range lines {
		switch {
		case strings.Contains(l.text, "workload started"):
			if m := restartsAttr.FindStringSubmatch(l.text); m != nil {
				if n, _ := strconv.Atoi(m[1]); n > o.supervisorRestarts {
					o.supervisorRestarts = n
				}
			}
		case strings.Contains(l.text, "holding the container idle"):
			o.held = true
		}
	}
	return o
}

func terminal(p corev1.PodPhase) bool { return p == corev1.PodSucceeded || p == corev1.PodFailed }

// waitPod polls a pod and the logs of one container until done says so.
func (e *env) waitPod(ctx context.Context, name, container string, timeout time.Duration,
	done func(*corev1.Pod, observation) bool) (*corev1.Pod, observation, error) {
	deadline := time.Now().Add(timeout)
	for {
		pod, err := e.c.Client.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, observation{}, err
		}
		o := observe(pod, container, e.containerLogs(ctx, pod, container), e.events(pod.Name, container))
		if done(pod, o) {
			return pod, o, nil
		}
		if time.Now().After(deadline) {
			return pod, o, fmt.Errorf("pod %s: condition not reached in %s (phase %s)", name, timeout, pod.Status.Phase)
		}
		select {
		case <-ctx.Done():
			return pod, o, ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// annotationCarrier reports whether pods must carry their restart rules
// in the restart-supervisor.dev/rules annotation: through the webhook
// (supervised or auto), on a release without the fields
// (cluster.RestartRulesNative), as a user of it writes them.
func (e *env) annotationCarrier() bool {
	return e.mode != native && !cluster.RestartRulesNative(e.c.KubeVersion)
}

// createPod creates a pod, through the supervised mode's mutation when
// there is one.
func (e *env) createPod(ctx context.Context, name string, spec corev1.PodSpec) error {
	// The label lets a scenario's Service select the pod.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Labels: map[string]string{"e2e-pod": name}}, Spec: spec}
	if e.annotationCarrier() {
		if err := cluster.RulesToAnnotation(&pod.ObjectMeta, &pod.Spec); err != nil {
			return fmt.Errorf("pod %s: %w", name, err)
		}
	}
	if e.mutatePod != nil {
		var err error
		if pod, err = e.mutatePod(ctx, pod); err != nil {
			return fmt.Errorf("pod %s: %w", name, err)
		}
	}
	_, err := e.c.Client.CoreV1().Pods(e.ns).Create(ctx, pod, metav1.CreateOptions{})
	return err
}

func (e *env) createJob(ctx context.Context, job *batchv1.Job) error {
	if e.annotationCarrier() {
		job = job.DeepCopy()
		if err := cluster.RulesToAnnotation(&job.Spec.Template.ObjectMeta, &job.Spec.Template.Spec); err != nil {
			return fmt.Errorf("job %s: %w", job.Name, err)
		}
	}
	if e.mutateJob != nil {
		var err error
		if job, err = e.mutateJob(ctx, job); err != nil {
			return fmt.Errorf("job %s: %w", job.Name, err)
		}
	}
	_, err := e.c.Client.BatchV1().Jobs(e.ns).Create(ctx, job, metav1.CreateOptions{})
	return err
}

// deletion is what deleteAndWait saw of a pod's end.
type deletion struct {
	// took is from the delete call until the pod object was gone. It
	// includes the kubelet's cleanup and status sync after the container
	// ended (measured 6 to 15 s for a container that exits at once under
	// a 10 s grace), so it says little about the container itself.
	took time.Duration
	// exit is the container's last terminated state the kubelet wrote
	// before the pod object went; nil when none was seen.
	exit *corev1.ContainerStateTerminated
	// stopped is from the delete call until the container finished, by
	// the kubelet's own finishedAt (whole seconds, so up to 1 s early).
	stopped time.Duration
	// restartedAfter: the workload started again after the delete call.
	restartedAfter bool
}

// withinGrace tells whether the container ended by itself within the grace
// period: it exited before the runtime's SIGKILL at the grace period's end
// (an exit code of 137 then).
//
// The exit code decides, not the time: the kubelet may send the stop
// signal seconds after the delete call on a loaded node (10 s measured),
// and the runtime's grace period starts with that signal, so an exit of
// the workload's own is within it however late it comes.
func (d deletion) withinGrace() bool {
	return d.exit != nil && d.exit.ExitCode != 137
}

// graceOutcome names how the container ended for a scenario's outcome.
func (d deletion) graceOutcome() string {
	switch {
	case d.exit == nil:
		return "exit not seen"
	case d.withinGrace():
		return "stopped within the grace period"
	default:
		return fmt.Sprintf("killed at the end of the grace period (exit %d)", d.exit.ExitCode)
	}
}

// notes are the figures a scenario's row shows.
func (d deletion) notes() []string {
	n := []string{fmt.Sprintf("delete → gone %.1fs", d.took.Seconds())}
	if d.exit != nil {
		n = append(n, fmt.Sprintf("delete → exit %d at %.0fs", d.exit.ExitCode, d.stopped.Seconds()))
	}
	return n
}

// deleteAndWait deletes a pod with the given grace period and watches it
// until it is gone. Every status the kubelet writes while the pod
// terminates comes through the watch, including the terminated state it
// writes just before it deletes the pod object.
func (e *env) deleteAndWait(ctx context.Context, name, container string, grace int64, timeout time.Duration) (deletion, error) {
	var d deletion
	pod, err := e.c.Client.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return d, err
	}
	w, err := e.c.Client.CoreV1().Pods(e.ns).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: pod.ResourceVersion,
	})
	if err != nil {
		return d, err
	}
	defer w.Stop()
	start, startUp := time.Now(), uptime()
	if err := e.c.Client.CoreV1().Pods(e.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		return d, err
	}
	deadline := time.After(timeout)
	poll := time.NewTicker(200 * time.Millisecond)
	defer poll.Stop()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return d, fmt.Errorf("pod %s: watch closed before the pod was gone", name)
			}
			if p, isPod := ev.Object.(*corev1.Pod); isPod {
				if cs := containerStatus(p, container); cs != nil && cs.State.Terminated != nil {
					d.exit = cs.State.Terminated
					d.stopped = d.exit.FinishedAt.Sub(start)
				}
			}
			if ev.Type == watch.Deleted {
				d.took = time.Since(start)
				return d, nil
			}
		case <-poll.C:
			for _, ev := range e.events(name, container) {
				if ev.kind == markStart && ev.at > startUp {
					d.restartedAfter = true
				}
			}
		case <-deadline:
			return d, fmt.Errorf("pod %s still present %s after delete", name, timeout)
		case <-ctx.Done():
			return d, ctx.Err()
		}
	}
}
