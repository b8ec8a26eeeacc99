//go:build training

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/rules"
	"github.com/restart-supervisor/restart-supervisor/test/e2e/cluster"
)

var updateTraining = flag.Bool("update-training", false, "write docs/training.md from this run")

// The job every path runs: examples/training/train.py, 2 ranks, trainSteps
// steps, a checkpoint every trainEvery, one rank faulting at trainFault.
const (
	trainSteps = 40
	trainEvery = 10
	trainFault = 25
	// trainFaultRank is the rank that faults; rank 0 hosts the rendezvous.
	trainFaultRank = 1
)

// trainingScenario is one shape of job the paths run.
type trainingScenario struct {
	id, title, text string
	// world is the job's ranks.
	world int
	// queue: the scenario's JobSets are admitted by Kueue, and its table
	// says what Kueue did (queueRow).
	queue bool
	// unfaulted is the scenario's Job without a fault: its final loss is
	// the one every faulted run of a scenario of its world must reach (the
	// loss depends on the world, not on the pods' shape). Nil: another
	// scenario's of the same world.
	unfaulted func(e *env, name, ckpt string, port int) (*batchv1.Job, error)
}

// The scenarios, in the report's order.
var (
	ddpScenario = &trainingScenario{id: "ddp", world: 2, unfaulted: func(e *env, name, ckpt string, port int) (*batchv1.Job, error) {
		return trainingJob(e, name, ckpt, port, nil, false)
	},
		title: "Two pods, one rank each: train.py is the container's process",
		text: "An indexed Job of two pods, one rank each (`JOB_COMPLETION_INDEX` is the rank; torchrun's rows: one pod of both ranks), " +
			"the rendezvous on 127.0.0.1. Rank 1 faults at step %d."}
	torchrunScenario = &trainingScenario{id: "torchrun", world: 4, unfaulted: func(e *env, name, ckpt string, port int) (*batchv1.Job, error) {
		return torchrunPodsJob(e, name, ckpt, port, nil, 0), nil
	},
		title: "Two pods of two ranks each under torchrun",
		text: "An indexed Job of two pods, each `torchrun --nnodes 2 --nproc_per_node 2 --rdzv_backend static` (the store " +
			"on pod 0 at 127.0.0.1, the node rank from the completion index in `PET_NODE_RANK`) with `--max-restarts 0`, so " +
			"that recovery is the restart policy's job (torchrun's own row: `--max-restarts 3`). The rank 1 worker (pod 0, " +
			"which hosts the store) exits 42 at step %d; torchrun exits 1 whatever its worker's code, so the rules restart on 1."}
	sidecarScenario = &trainingScenario{id: "sidecar", world: 2,
		title: "Two pods, each a trainer and a logger sidecar: RestartAllContainers",
		text: "The first scenario's Job with a native sidecar in each pod (an init container with `restartPolicy: Always` " +
			"that follows its rank's log file) and the trainer's rule `RestartAllContainers` on 1, 42 and 137: the sidecar is " +
			"restarted with the trainer (KEP-5532). Rank 1 exits 42 at step %d."}
	// memoryScenario is the first scenario's Job with the checkpoint in
	// each pod's memory (inMemory); its unfaulted run is the first's.
	memoryScenario = &trainingScenario{id: "memory", world: 2,
		title: "The checkpoint in memory: what only an in-place restart keeps",
		text: "The first scenario's Job (two pods, one rank each; rank 1 exits 42 at step %d) with the checkpoint kept only in " +
			"memory: each pod has an emptyDir of `medium: Memory` (a tmpfs, as `/dev/shm` is) at `" + memoryCkpt + "`, where each " +
			"rank writes its own checkpoint (`--save-dir " + memoryCkpt + " --save-per-rank`: the ranks resume from the step they " +
			"all have, step 0 when one has none); the fault marker and the log files stay in the node directory. An emptyDir " +
			"lives as long as its pod: a restart in place keeps the pod and so the memory, and the supervised row resumes from the " +
			"checkpoint of step 20 as the node directory's rows do, while a recreated pod starts with an empty one, and the Job's " +
			"row starts over from step 0 (it still reaches the unfaulted loss because train.py's steps depend only on the step). " +
			"This is what checkpoint-free recovery relies on, in-memory checkpoints that a job keeps in its hosts' memory instead " +
			"of writing them to storage: only a restart in place keeps them. A JobSet's restart (`failurePolicy`) recreates every " +
			"pod, so it loses the memory as the Job's row does (its row, measured beside them)."}
	trainingScenarios = []*trainingScenario{ddpScenario, memoryScenario, torchrunScenario, sidecarScenario, kueueScenario}
)

// trainingPath is one way a job can recover from a rank's fault.
type trainingPath struct {
	id, name string
	scenario *trainingScenario
	// faults are the ids of the faults the path runs; nil: the faults
	// that exit (trainingFaults), not the hang nor the check under load.
	faults []string
	// since is the oldest minor release that has the path (0: every one).
	since int
	// job builds the path's Job for one run: ckpt is the node directory
	// of the checkpoints, the fault marker and the ranks' log files.
	job func(e *env, name, ckpt string, port int, fault []string) (*batchv1.Job, error)
	// jobSet, when set, builds a JobSet instead of a Job.
	jobSet func(e *env, name, ckpt string, port int, fault []string) (*unstructured.Unstructured, error)
	// supervised: the path's pods run under the supervisor, so that
	// `restart-injector status` has rows for them.
	supervised bool
}

func (p trainingPath) runs(f trainingFault) bool {
	if p.faults == nil {
		return !f.hang && !f.load
	}
	return slices.Contains(p.faults, f.id)
}

// selector selects the pods of one run of the path.
func (p trainingPath) selector(key string) string {
	if p.jobSet != nil {
		return "jobset.sigs.k8s.io/jobset-name=" + key
	}
	return "batch.kubernetes.io/job-name=" + key
}

// trainingGroupRules restart every rank's container together, on the
// same exits as trainingRules.
const trainingGroupRules = `{"trainer": {"restartPolicy": "Never", "restartPolicyRules": [` +
	`{"action": "RestartGroup", "exitCodes": {"operator": "In", "values": [1, 42, 137]}}]}}`

// selectedTrainingPaths are the paths TRAINING_PATHS names (path ids,
// comma-separated), all of them when it is empty.
func selectedTrainingPaths(t *testing.T) []trainingPath {
	// The report keys each row by its path's id.
	seen := map[string]bool{}
	for _, p := range trainingPaths() {
		if seen[p.id] {
			t.Fatalf("two training paths have the id %q", p.id)
		}
		seen[p.id] = true
	}
	want := os.Getenv("TRAINING_PATHS")
	if want == "" {
		return trainingPaths()
	}
	var out []trainingPath
	ids := map[string]bool{}
	for _, id := range strings.Split(want, ",") {
		ids[strings.TrimSpace(id)] = true
	}
	for _, p := range trainingPaths() {
		if ids[p.id] {
			out = append(out, p)
			delete(ids, p.id)
		}
	}
	if len(ids) > 0 {
		t.Fatalf("TRAINING_PATHS names unknown paths %v", ids)
	}
	return out
}

// trainingFault is one way a rank fails.
type trainingFault struct {
	id, name string
	args     []string
	// hang: the rank stops making progress without exiting; its rows are
	// the hang section's, and only the paths that name it run it.
	hang bool
	// load: no fault, the watchdog's check under CPU load (watchdogLoad):
	// an unfaulted run whose steps are slower must not be stopped.
	load bool
}

// trainingFaults are the faults, in the report's order.
func trainingFaults() []trainingFault {
	return []trainingFault{
		{id: "exit42", name: "rank 1 exits 42 at step 25", args: []string{"--fault-kind", "exit", "--fault-code", "42"}},
		{id: "kill", name: "rank 1 is SIGKILLed at step 25", args: []string{"--fault-kind", "kill"}},
		{id: "hang", name: "rank 1 hangs at step 25", args: []string{"--fault-kind", "hang"}, hang: true},
		{id: "load", name: "none, under CPU load", load: true},
	}
}

// trainingRun is what one run of a path gave.
type trainingRun struct {
	rec            recoveryTime
	pods           int   // pods the Job created
	kubeletRestart int32 // the kubelet's restartCount, summed over the Job's pods
	state          string
	err            error
	steps          stepStats
	// The watchdog's check under load (watchdogLoad): the runs it
	// stopped, by the supervisor's log, and the slowest rank's first
	// heartbeat after its start, seconds.
	stalls    int
	firstBeat float64
	// queue is what Kueue did with a queue row's JobSet.
	queue *queueTrack
	// finished is when the run's JobSet was first seen Completed or
	// Failed (JobSet rows).
	finished time.Time
}

// stepStats is the pace of a run's steps: the seconds between two
// consecutive steps of a rank within one attempt, the median and the
// longest (a checkpoint's step and its barrier), over every rank. train.py
// touches its heartbeat file right after each step's line, so these are
// the gaps between two heartbeats too.
type stepStats struct {
	median, longest float64
}

// stepStatsOf reads the pace of the steps from the ranks' log files.
func stepStatsOf(ranks [][]trainLine) stepStats {
	var gaps []float64
	for _, lines := range ranks {
		prev := -1
		for i, l := range lines {
			switch {
			case l.Event == "start":
				prev = -1
			case l.Event == "" && l.Step > 0:
				if prev >= 0 && lines[prev].Step == l.Step-1 {
					gaps = append(gaps, l.Time-lines[prev].Time)
				}
				prev = i
			}
		}
	}
	if len(gaps) == 0 {
		return stepStats{}
	}
	return stepStats{median: medianOf(gaps), longest: slices.Max(gaps)}
}

// recoveryTime is one faulted run read from the ranks' log files.
type recoveryTime struct {
	seconds    float64 // fault → first step completed after the resume, the slower rank
	stepsLost  int
	finalLoss  float64
	resumeFrom int
	faultAt    float64 // Unix seconds of the fault line
}

// trainLine is one JSON line of train.py.
type trainLine struct {
	Rank       int     `json:"rank"`
	Event      string  `json:"event"`
	Step       int     `json:"step"`
	Time       float64 `json:"time"`
	ResumeFrom int     `json:"resumeFrom"`
	FinalLoss  float64 `json:"finalLoss"`
	StartTime  int64   `json:"startTime"`
}

// trainingRules restart the faulting rank's 42, SIGKILL's 137 and 1, the
// peer's Python error when gloo loses its connection.
func trainingRules() (*corev1.ContainerRestartPolicy, []corev1.ContainerRestartRule) {
	return policy(corev1.ContainerRestartPolicyNever), []corev1.ContainerRestartRule{
		rule(corev1.ContainerRestartRuleActionRestart, corev1.ContainerRestartRuleOnExitCodesOpIn, 1, 42, 137)}
}

// TestTrainingOnKubelet runs examples/training on a real kubelet of the
// release in KUBE_BIN_DIR (setup.sh's otherwise) as an indexed Job of two
// pods, one rank each, DDP over gloo on the host network's loopback, with
// the checkpoints in a node directory that outlives the pods. Rank 1 exits
// 42, or is SIGKILLed, or hangs, at step 25; each recovery path of
// trainingPaths runs TRAINING_RUNS (default 5) times per fault it takes, in
// one run of the cluster, and every run must end with an unfaulted run's
// final loss, bit for bit; the watchdog's check under load runs the same
// way. With -update-training it writes docs/training.md, with
// TRAINING_PATHS only the rows of the paths it names.
func TestTrainingOnKubelet(t *testing.T) {
	repo, binDir := prepareNode(t)
	runs := 5
	if v, err := strconv.Atoi(os.Getenv("TRAINING_RUNS")); err == nil && v > 0 {
		runs = v
	}
	out, err := exec.Command(filepath.Join(repo, "hack", "training-rootfs.sh")).Output()
	if err != nil {
		unavailable(t, "hack/training-rootfs.sh (Debian bookworm with python3-torch) failed: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	rootfs := lines[len(lines)-1]
	image := rootfs + ".image.tar"
	imageStart := time.Now()
	if err := cluster.BuildTrainingImage(rootfs, image); err != nil {
		t.Fatal(err)
	}
	t.Logf("training image %s ready in %s", image, time.Since(imageStart).Round(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Hour)
	defer cancel()
	paths := selectedTrainingPaths(t)
	upStart := time.Now()
	c, err := cluster.Up(ctx, cluster.Options{
		BinDir: binDir, Repo: repo, RestartRules: true, ControllerManager: true, GarbageCollector: true,
		SupervisorImage: true, Images: []string{image}, JobSetDir: jobSetDir(t, repo), Kueue: kueueOptions(t, repo, paths), Log: testWriter{t},
	})
	if err != nil {
		t.Fatalf("cluster up: %v", err)
	}
	tearDownAtEnd(t, c)
	t.Logf("cluster %s up in %s", c.KubeVersion, time.Since(upStart).Round(time.Second))
	e := &env{mode: supervised, repo: repo, c: c, ns: "default"}
	e.superviseWithInjector()
	loadStart := loadAverage()

	port := 29800
	next := func() int { port++; return port }
	// The final loss of an unfaulted run, and the pace of its steps, per
	// world size.
	want := map[int]float64{}
	pace := map[int]stepStats{}
	for _, sc := range trainingScenarios {
		if sc.unfaulted == nil || !slices.ContainsFunc(paths, func(p trainingPath) bool { return p.scenario.world == sc.world }) {
			continue
		}
		key := "unfaulted-" + sc.id
		ckpt := trainingCkpt(t, c, key)
		base, err := sc.unfaulted(e, key, ckpt, next())
		if err != nil {
			t.Fatal(err)
		}
		unfaulted, err := runTrainingJob(ctx, e, base, ckpt, sc.world, false)
		if err != nil {
			t.Fatalf("unfaulted run of %d ranks: %v\n%s", sc.world, err, jobLogs(ctx, e, "batch.kubernetes.io/job-name="+key))
		}
		want[sc.world], pace[sc.world] = unfaulted.rec.finalLoss, unfaulted.steps
		t.Logf("unfaulted final loss of %d ranks: %v; a step every %.1f ms (median), the longest gap %.0f ms",
			sc.world, want[sc.world], 1000*unfaulted.steps.median, 1000*unfaulted.steps.longest)
	}

	faults := trainingFaults()
	// One node agent for every path, with group restarts, and the
	// restart-injector binary: what `restart-injector status` shows of
	// each path is part of the report.
	startTrainingAgent(ctx, t, c, binDir, repo)
	injectorBin := filepath.Join(t.TempDir(), "restart-injector")
	if out, err := exec.Command("go", "build", "-o", injectorBin, filepath.Join(repo, "cmd", "restart-injector")).CombinedOutput(); err != nil {
		t.Fatalf("build restart-injector: %v\n%s", err, out)
	}
	results := map[string]map[string][]trainingRun{}
	shown := map[string]string{}
	for _, p := range paths {
		results[p.id] = map[string][]trainingRun{}
		if p.since > 0 && cluster.Minor(c.KubeVersion) < p.since {
			t.Logf("%s: not in Kubernetes %s (from 1.%d)", p.name, c.KubeVersion, p.since)
			continue
		}
		for _, f := range faults {
			if !p.runs(f) {
				continue
			}
			for i := range runs {
				key := fmt.Sprintf("%s-%s-%d", p.id, f.id, i)
				ckpt := trainingCkpt(t, c, key)
				fault := slices.Concat(f.args, []string{"--fault-rank", strconv.Itoa(trainFaultRank), "--fault-step", strconv.Itoa(trainFault)})
				if f.load {
					fault = append(fault, "--step-time", strconv.FormatFloat(loadSlowdown*loadStep, 'f', -1, 64))
				}
				var run trainingRun
				var err error
				if p.jobSet != nil {
					var js *unstructured.Unstructured
					if js, err = p.jobSet(e, key, ckpt, next(), fault); err != nil {
						t.Fatalf("%s, %s: %v", p.name, f.name, err)
					}
					run, err = runTrainingJobSet(ctx, e, js, ckpt, p.scenario.world)
				} else {
					var job *batchv1.Job
					if job, err = p.job(e, key, ckpt, next(), fault); err != nil {
						t.Fatalf("%s, %s: %v", p.name, f.name, err)
					}
					if f.load {
						run, err = watchdogLoad(ctx, e, job, ckpt, p.scenario.world)
					} else {
						run, err = runTrainingJob(ctx, e, job, ckpt, p.scenario.world, true)
					}
				}
				// A failed run fails the test but not the others: the
				// report then says which runs failed, and why.
				if w := want[p.scenario.world]; err == nil && run.rec.finalLoss != w {
					err = fmt.Errorf("final loss %v, want the unfaulted %v", run.rec.finalLoss, w)
				}
				if err != nil {
					t.Errorf("%s, %s, run %d: %v\n%s", p.name, f.name, i, err, jobLogs(ctx, e, p.selector(key)))
					run.err = err
					results[p.id][f.name] = append(results[p.id][f.name], run)
					continue
				}
				if f.load {
					t.Logf("%s, %s, run %d: a step every %.1f ms (median; unfaulted %.1f ms), the longest gap %.0f ms, the first heartbeat after %.2f s, %d stalls, %s",
						p.name, f.name, i, 1000*run.steps.median, 1000*pace[p.scenario.world].median, 1000*run.steps.longest, run.firstBeat, run.stalls, run.state)
				} else {
					t.Logf("%s, %s, run %d: %.2f s to the first step after resume, %d steps lost, %d pods, restartCount %d, %s",
						p.name, f.name, i, run.rec.seconds, run.rec.stepsLost, run.pods, run.kubeletRestart, run.state)
					if q := run.queue; q != nil {
						t.Logf("%s, %s, run %d, Kueue: %d Workloads, %d evictions %v, PodsReady false %.1f s, admission lost %.1f s, quota with no pod running %.1f s",
							p.name, f.name, i, len(q.workloads), q.evictions(), q.reasons, q.unready.Seconds(), q.admissionLost.Seconds(), q.idleQuota.Seconds())
					}
				}
				results[p.id][f.name] = append(results[p.id][f.name], run)
				if _, ok := shown[p.id]; !ok && !f.load {
					shown[p.id] = whatUsersSee(ctx, c, binDir, injectorBin, p, key)
					t.Logf("%s:\n%s", p.name, shown[p.id])
				}
			}
		}
	}
	if *updateTraining {
		file := filepath.Join(repo, "docs", "training-"+c.KubeVersion+".md")
		r := trainingResults{c: c, runs: runs, loadStart: loadStart, want: want, pace: pace, paths: paths, faults: faults, results: results, shown: shown}
		// A run of some paths rewrites their rows and keeps the others'.
		if os.Getenv("TRAINING_PATHS") != "" {
			old, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("TRAINING_PATHS with -update-training rewrites the rows of %s, which cannot be read: %v", file, err)
			}
			prior := parsePriorReport(string(old))
			r.prior = &prior
		}
		if err := os.WriteFile(file, []byte(trainingReport(r)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := writeTrainingIndex(filepath.Join(repo, "docs")); err != nil {
			t.Fatal(err)
		}
	}
}

// whatUsersSee is what `kubectl get pods` and `restart-injector status`
// print about one run's pods once it ended, as a user would run them.
func whatUsersSee(ctx context.Context, c *cluster.Cluster, binDir, injectorBin string, p trainingPath, key string) string {
	var b strings.Builder
	commands := [][]string{{filepath.Join(binDir, "kubectl"), "get", "pods", "-l", p.selector(key)}}
	if p.supervised {
		commands = append(commands, []string{injectorBin, "status", "-l", p.selector(key)})
	}
	for _, argv := range commands {
		cmd := exec.CommandContext(ctx, argv[0], append(argv[1:], "--kubeconfig", c.Kubeconfig, "-n", "default")...)
		out, err := cmd.CombinedOutput()
		fmt.Fprintf(&b, "$ %s %s\n%s", filepath.Base(argv[0]), strings.Join(argv[1:], " "), out)
		if err != nil {
			fmt.Fprintf(&b, "(%v)\n", err)
		}
	}
	return b.String()
}

// jobLogs is the last lines each trainer of the selected pods wrote.
func jobLogs(ctx context.Context, e *env, selector string) string {
	pods, err := e.c.Client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	tail := int64(30)
	for _, p := range pods.Items {
		out, err := e.c.Client.CoreV1().Pods(e.ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: "trainer", TailLines: &tail}).DoRaw(ctx)
		fmt.Fprintf(&b, "== %s (%s): %v\n%s\n", p.Name, p.Status.Phase, err, out)
	}
	return b.String()
}

// trainingCkpt makes the node directory of one run: a hostPath, so that
// the checkpoint outlives a pod the Job controller replaces.
func trainingCkpt(t *testing.T, c *cluster.Cluster, key string) string {
	dir := filepath.Join(c.Dir, "training", key)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// trainingPaths are the recovery paths, each the Job a user would write,
// scenario by scenario. Ids are unique; names repeat across scenarios.
func trainingPaths() []trainingPath {
	exit42, hang := []string{"exit42"}, []string{"hang"}
	return append([]trainingPath{
		{id: "supervised", name: "in place, restart-supervisor", scenario: ddpScenario, supervised: true, job: func(e *env, name, ckpt string, port int, fault []string) (*batchv1.Job, error) {
			job, err := trainingJob(e, name, ckpt, port, fault, true)
			if err != nil {
				return nil, err
			}
			return superviseTrainingJob(e, job)
		}},
		{id: "group", name: "in place, every rank's container, restart-supervisor RestartGroup", scenario: ddpScenario, supervised: true, job: func(e *env, name, ckpt string, port int, fault []string) (*batchv1.Job, error) {
			job, err := trainingJob(e, name, ckpt, port, fault, false)
			if err != nil {
				return nil, err
			}
			// The group action exists only in the annotation carrier. The
			// Job's pods form one group by their job-name label.
			job.Spec.Template.Annotations = map[string]string{contract.AnnotationRules: trainingGroupRules}
			return e.mutateJob(context.Background(), job)
		}},
		{id: "native", name: "in place, the kubelet's container rules (KEP-5307)", scenario: ddpScenario, job: func(e *env, name, ckpt string, port int, fault []string) (*batchv1.Job, error) {
			return trainingJob(e, name, ckpt, port, fault, true)
		}},
		{id: "recreated", name: "pods recreated, Job backoffLimit", scenario: ddpScenario, job: func(e *env, name, ckpt string, port int, fault []string) (*batchv1.Job, error) {
			return trainingJob(e, name, ckpt, port, fault, false)
		}},
		{id: "podfailurepolicy", name: "pods recreated, Job podFailurePolicy Ignore", scenario: ddpScenario, job: func(e *env, name, ckpt string, port int, fault []string) (*batchv1.Job, error) {
			job, err := trainingJob(e, name, ckpt, port, fault, false)
			if err != nil {
				return nil, err
			}
			// The same exits as the rules, not counted against
			// backoffLimit: the Job controller replaces the pod.
			job.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action: batchv1.PodFailurePolicyActionIgnore,
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
					ContainerName: ptr("trainer"), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{1, 42, 137}},
			}}}
			return job, nil
		}},
		{id: "jobset", name: "all pods recreated, JobSet failurePolicy.maxRestarts 3", scenario: ddpScenario, jobSet: func(e *env, name, ckpt string, port int, fault []string) (*unstructured.Unstructured, error) {
			job, err := trainingJob(e, name, ckpt, port, fault, false)
			if err != nil {
				return nil, err
			}
			return trainingJobSet(e, name, job)
		}},
		{id: "jobset-supervised", name: "in place in a JobSet, restart-supervisor (failurePolicy.maxRestarts 3 unused)", scenario: ddpScenario, supervised: true, jobSet: func(e *env, name, ckpt string, port int, fault []string) (*unstructured.Unstructured, error) {
			job, err := trainingJob(e, name, ckpt, port, fault, true)
			if err != nil {
				return nil, err
			}
			if err := cluster.RulesToAnnotation(&job.Spec.Template.ObjectMeta, &job.Spec.Template.Spec); err != nil {
				return nil, err
			}
			js, err := trainingJobSet(e, name, job)
			if err != nil {
				return nil, err
			}
			// The JobSet itself goes through the injector, as
			// `restart-injector inject` or the webhook takes it.
			return e.mutateObject(context.Background(), js)
		}},
		{id: "torchrun", name: "in process, torchrun --max-restarts 3 (one pod of both ranks)", scenario: ddpScenario, job: torchrunJob},

		{id: "memory-supervised", name: "in place, restart-supervisor", scenario: memoryScenario, faults: exit42, supervised: true, job: func(e *env, name, ckpt string, port int, fault []string) (*batchv1.Job, error) {
			job, err := trainingJob(e, name, ckpt, port, fault, true)
			if err != nil {
				return nil, err
			}
			return superviseTrainingJob(e, inMemory(job))
		}},
		{id: "memory-recreated", name: "pods recreated, Job backoffLimit", scenario: memoryScenario, faults: exit42, job: func(e *env, name, ckpt string, port int, fault []string) (*batchv1.Job, error) {
			job, err := trainingJob(e, name, ckpt, port, fault, false)
			if err != nil {
				return nil, err
			}
			return inMemory(job), nil
		}},
		{id: "memory-jobset", name: "all pods recreated, JobSet failurePolicy.maxRestarts 3", scenario: memoryScenario, faults: exit42, jobSet: func(e *env, name, ckpt string, port int, fault []string) (*unstructured.Unstructured, error) {
			job, err := trainingJob(e, name, ckpt, port, fault, false)
			if err != nil {
				return nil, err
			}
			return trainingJobSet(e, name, inMemory(job))
		}},

		{id: "torchrun-supervised", name: "in place, restart-supervisor", scenario: torchrunScenario, faults: exit42, supervised: true, job: func(e *env, name, ckpt string, port int, fault []string) (*batchv1.Job, error) {
			return superviseTrainingJob(e, torchrunPodsJob(e, name, ckpt, port, fault, 0, restartIn(1)))
		}},
		{id: "torchrun-group", name: "in place, every pod's container, restart-supervisor RestartGroup", scenario: torchrunScenario, faults: exit42, supervised: true, job: func(e *env, name, ckpt string, port int, fault []string) (*batchv1.Job, error) {
			job := torchrunPodsJob(e, name, ckpt, port, fault, 0)
			job.Spec.Template.Annotations = map[string]string{contract.AnnotationRules: `{"trainer": {"restartPolicy": "Never", "restartPolicyRules": [` +
				`{"action": "RestartGroup", "exitCodes": {"operator": "In", "values": [1]}}]}}`}
			return e.mutateJob(context.Background(), job)
		}},
		{id: "torchrun-native", name: "in place, the kubelet's container rules (KEP-5307)", scenario: torchrunScenario, faults: exit42, job: func(e *env, name, ckpt string, port int, fault []string) (*batchv1.Job, error) {
			return torchrunPodsJob(e, name, ckpt, port, fault, 0, restartIn(1)), nil
		}},
		{id: "torchrun-recreated", name: "pods recreated, Job backoffLimit", scenario: torchrunScenario, faults: exit42, job: func(e *env, name, ckpt string, port int, fault []string) (*batchv1.Job, error) {
			return torchrunPodsJob(e, name, ckpt, port, fault, 0), nil
		}},
		{id: "torchrun-jobset", name: "all pods recreated, JobSet failurePolicy.maxRestarts 3", scenario: torchrunScenario, faults: exit42, jobSet: func(e *env, name, ckpt string, port int, fault []string) (*unstructured.Unstructured, error) {
			return trainingJobSet(e, name, torchrunPodsJob(e, name, ckpt, port, fault, 0))
		}},
		{id: "torchrun-elastic", name: "in process, torchrun --max-restarts 3", scenario: torchrunScenario, faults: exit42, job: func(e *env, name, ckpt string, port int, fault []string) (*batchv1.Job, error) {
			job := torchrunPodsJob(e, name, ckpt, port, fault, 3)
			zero := int32(0)
			job.Spec.BackoffLimit = &zero
			return job, nil
		}},

		{id: "sidecar-supervised", name: "every container of the pod, restart-supervisor", scenario: sidecarScenario, faults: exit42, supervised: true, job: func(e *env, name, ckpt string, port int, fault []string) (*batchv1.Job, error) {
			job, err := sidecarJob(e, name, ckpt, port, fault)
			if err != nil {
				return nil, err
			}
			return superviseTrainingJob(e, job)
		}},
		// RestartAllContainers: alpha in 1.35 (the cluster turns its gates
		// on), beta and on by default from 1.36.
		{id: "sidecar-native", name: "every container of the pod, the kubelet (KEP-5532)", scenario: sidecarScenario, faults: exit42, since: 35, job: sidecarJob},

		// A rank that hangs (the hang section): the first scenario's Job
		// unless the path says otherwise. The first path also runs the
		// watchdog's check under load.
		{id: "hang-group", name: "watchdog (heartbeat file), restart-supervisor RestartGroup", scenario: ddpScenario, faults: []string{"hang", "load"}, supervised: true, job: func(e *env, name, ckpt string, port int, fault []string) (*batchv1.Job, error) {
			return annotatedTrainingJob(e, name, ckpt, port, withHeartbeat(fault), hangRules("RestartGroup", []int32{1, 42, 124}, fileWatchdog()))
		}},
		{id: "hang-torchrun-group", name: "torchrun, two pods of two ranks: watchdog (the ranks' output), restart-supervisor RestartGroup", scenario: torchrunScenario, faults: hang, supervised: true, job: func(e *env, name, ckpt string, port int, fault []string) (*batchv1.Job, error) {
			job := torchrunPodsJob(e, name, ckpt, port, fault, 0)
			job.Spec.Template.Annotations = map[string]string{contract.AnnotationRules: hangRules("RestartGroup", []int32{1, 124}, outputWatchdog())}
			return e.mutateJob(context.Background(), job)
		}},
		{id: "hang-supervised", name: "watchdog (heartbeat file), restart-supervisor Restart", scenario: ddpScenario, faults: hang, supervised: true, job: func(e *env, name, ckpt string, port int, fault []string) (*batchv1.Job, error) {
			return annotatedTrainingJob(e, name, ckpt, port, withHeartbeat(fault), hangRules("Restart", []int32{1, 42, 124}, fileWatchdog()))
		}},
		{id: "hang-liveness", name: "the kubelet's liveness probe (heartbeat file), pod restartPolicy OnFailure", scenario: ddpScenario, faults: hang, job: livenessJob},
		{id: "hang-timeout", name: "no detection: the collective timeout, restart-supervisor RestartGroup on 1", scenario: ddpScenario, faults: hang, supervised: true, job: func(e *env, name, ckpt string, port int, fault []string) (*batchv1.Job, error) {
			return annotatedTrainingJob(e, name, ckpt, port, fault, hangRules("RestartGroup", []int32{1}, nil))
		}},
	}, kueuePaths()...)
}

// The hang rows' detection, the watchdog's and the liveness probe's alike:
// no heartbeat for hangStall seconds is a hang. A step of train.py here
// takes milliseconds, the longest gap between two heartbeats (a
// checkpoint's step) a fraction of a second, under CPU load too (the check
// under load measures both), so a stall of hangStall seconds is no slow
// step; the first heartbeat, after torch's import and the rendezvous, may
// take hangFirstBeat. The grace period is short: under the supervisor the
// stop signal ends train.py at once, and as a container's PID 1 it ignores
// the signal, so that the grace period is spent in full.
const (
	hangStall     = 10
	hangFirstBeat = 60
	hangGrace     = 2
	// hangHeartbeat is in the container's own file system: each pod's,
	// and a new container of the kubelet's starts without it.
	hangHeartbeat = "/tmp/heartbeat"
	// hangPattern is in train.py's line of each step.
	hangPattern = `"step": [0-9]+`
)

// fileWatchdog watches the heartbeat file train.py touches after each step
// (withHeartbeat).
func fileWatchdog() *rules.Watchdog {
	return &rules.Watchdog{HeartbeatFile: hangHeartbeat, FirstHeartbeatSeconds: hangFirstBeat, StallSeconds: hangStall, GracePeriodSeconds: ptr(int32(hangGrace))}
}

// outputWatchdog watches the lines of the steps on the workload's output,
// which torchrun passes through from its workers.
func outputWatchdog() *rules.Watchdog {
	return &rules.Watchdog{OutputPattern: hangPattern, FirstHeartbeatSeconds: hangFirstBeat, StallSeconds: hangStall, GracePeriodSeconds: ptr(int32(hangGrace))}
}

// withHeartbeat adds train.py's heartbeat file to its arguments.
func withHeartbeat(args []string) []string {
	return slices.Concat(args, []string{"--heartbeat-file", hangHeartbeat})
}

// hangRules is the trainer's entry of the rules annotation: action on the
// exit codes, under the watchdog w when it is not nil.
func hangRules(action string, codes []int32, w *rules.Watchdog) string {
	entry := map[string]any{"restartPolicy": "Never", "restartPolicyRules": []any{
		map[string]any{"action": action, "exitCodes": map[string]any{"operator": "In", "values": codes}}}}
	if w != nil {
		entry["watchdog"] = w
	}
	b, err := json.Marshal(map[string]any{"trainer": entry})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// annotatedTrainingJob is trainingJob with the rules annotation ann,
// through the injector.
func annotatedTrainingJob(e *env, name, ckpt string, port int, fault []string, ann string) (*batchv1.Job, error) {
	job, err := trainingJob(e, name, ckpt, port, fault, false)
	if err != nil {
		return nil, err
	}
	job.Spec.Template.Annotations = map[string]string{contract.AnnotationRules: ann}
	return e.mutateJob(context.Background(), job)
}

// livenessJob is trainingJob as a user without the supervisor detects a
// hang: the kubelet's exec probes on the heartbeat file's age every
// second, with the watchdog's bounds: a startup probe that waits up to
// hangFirstBeat for a fresh heartbeat, then a liveness probe whose
// default failureThreshold, 3, fails when no heartbeat came for
// hangStall seconds (the file older than livenessAge three times in a
// row), and kills the container after hangGrace; under the pod's
// restartPolicy OnFailure, since a probe's kill follows the restart
// policy, not a rule. One failure is not enough: the kubelet of 1.37.2
// runs the liveness probe once in the new container before its startup
// probe has passed (kubernetes/kubernetes#141155), and with
// failureThreshold 1 that kills the new container too.
func livenessJob(e *env, name, ckpt string, port int, fault []string) (*batchv1.Job, error) {
	job, err := trainingJob(e, name, ckpt, port, withHeartbeat(fault), false)
	if err != nil {
		return nil, err
	}
	spec := &job.Spec.Template.Spec
	spec.RestartPolicy = corev1.RestartPolicyOnFailure
	fresh := corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: livenessCommand()}}
	grace := int64(hangGrace)
	spec.Containers[0].StartupProbe = &corev1.Probe{ProbeHandler: fresh, PeriodSeconds: 1, FailureThreshold: hangFirstBeat}
	spec.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: fresh, PeriodSeconds: 1, FailureThreshold: livenessFailures, TerminationGracePeriodSeconds: &grace}
	return job, nil
}

// The liveness probe fails livenessFailures times a second apart once the
// heartbeat file is livenessAge seconds old: no heartbeat for hangStall.
const (
	livenessFailures = 3
	livenessAge      = hangStall - (livenessFailures - 1)
)

// livenessCommand is the probe: the heartbeat file younger than livenessAge.
func livenessCommand() []string {
	return []string{"/bin/sh", "-c", fmt.Sprintf(`test $(( $(date +%%s) - $(stat -c %%Y %s) )) -lt %d`, hangHeartbeat, livenessAge)}
}

// superviseTrainingJob moves the Job's rules into the annotation carrier,
// as on a cluster without the fields (the kubelet here has them, and must
// not see them), and injects the supervisor.
func superviseTrainingJob(e *env, job *batchv1.Job) (*batchv1.Job, error) {
	if err := cluster.RulesToAnnotation(&job.Spec.Template.ObjectMeta, &job.Spec.Template.Spec); err != nil {
		return nil, err
	}
	return e.mutateJob(context.Background(), job)
}

// torchrunPodsJob is the indexed Job of two pods, each a torchrun agent of
// two ranks allowed restarts in-process restarts; with rules, the trainer
// carries them under restartPolicy Never.
func torchrunPodsJob(e *env, name, ckpt string, port int, fault []string, restarts int, rules ...corev1.ContainerRestartRule) *batchv1.Job {
	// The static rendezvous, as a launcher of a Job's pods gives torchrun
	// (Kubeflow's PyTorchJob too): the store on pod 0 at a fixed port, the
	// node rank from the completion index (torchrun reads PET_NODE_RANK).
	// Not c10d: both agents' node descriptors would be the same (host
	// network: one hostname; each agent PID 1 of its container), and
	// torch 1.13's c10d rendezvous then waits for a second node forever.
	args := append([]string{"/usr/bin/torchrun", "--nnodes", "2", "--nproc_per_node", "2", "--max_restarts", strconv.Itoa(restarts),
		"--redirects", "2", "--tee", "2", "--rdzv_backend", "static", "--master_addr", "127.0.0.1",
		"--master_port", strconv.Itoa(port), "/examples/train.py"}, trainArgs(fault)...)
	c := trainerContainer(args, []corev1.EnvVar{{Name: "PET_NODE_RANK", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}})
	if len(rules) > 0 {
		c.RestartPolicy, c.RestartPolicyRules = policy(corev1.ContainerRestartPolicyNever), rules
	}
	return indexedTrainingJob(e, name, ckpt, c)
}

// sidecarJob is trainingJob with a logger sidecar in each pod, the
// trainer's rule RestartAllContainers.
func sidecarJob(e *env, name, ckpt string, port int, fault []string) (*batchv1.Job, error) {
	job, err := trainingJob(e, name, ckpt, port, fault, false)
	if err != nil {
		return nil, err
	}
	spec := &job.Spec.Template.Spec
	spec.Containers[0].RestartPolicy = policy(corev1.ContainerRestartPolicyNever)
	spec.Containers[0].RestartPolicyRules = []corev1.ContainerRestartRule{
		rule(corev1.ContainerRestartRuleActionRestartAllContainers, corev1.ContainerRestartRuleOnExitCodesOpIn, 1, 42, 137)}
	// Follows its rank's log file; a clean exit on the stop signal, so
	// that the pod's end leaves it Completed.
	logger := trainerContainer([]string{"/bin/sh", "-c",
		`trap 'exit 0' TERM; tail -n +1 -F /ckpt/rank$JOB_COMPLETION_INDEX.jsonl & wait`}, nil)
	logger.Name, logger.RestartPolicy = "logger", policy(corev1.ContainerRestartPolicyAlways)
	spec.InitContainers = []corev1.Container{logger}
	return job, nil
}

// trainingJobSet is a JobSet of one replicated Job, job's pods: a failed
// pod fails its Job (backoffLimit 0), and the JobSet controller recreates
// every Job, up to 3 times.
func trainingJobSet(e *env, name string, job *batchv1.Job) (*unstructured.Unstructured, error) {
	template, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(&job.Spec.Template)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "jobset.x-k8s.io/v1alpha2",
		"kind":       "JobSet",
		"metadata":   map[string]any{"name": name, "namespace": e.ns},
		"spec": map[string]any{
			"failurePolicy": map[string]any{"maxRestarts": int64(3)},
			"network":       map[string]any{"enableDNSHostnames": false},
			"replicatedJobs": []any{map[string]any{
				"name":     "workers",
				"replicas": int64(1),
				"template": map[string]any{"spec": map[string]any{
					"parallelism":    int64(*job.Spec.Parallelism),
					"completions":    int64(*job.Spec.Completions),
					"backoffLimit":   int64(0),
					"completionMode": "Indexed",
					"template":       template,
				}},
			}},
		},
	}}, nil
}

// runTrainingJobSet creates the JobSet, waits for it to complete and reads
// the ranks' log files. Its recreated pods are gone by then: the pods
// created are two per attempt (status.restarts + 1).
func runTrainingJobSet(ctx context.Context, e *env, js *unstructured.Unstructured, ckpt string, world int) (trainingRun, error) {
	var run trainingRun
	dyn, err := dynamic.NewForConfig(e.c.Config)
	if err != nil {
		return run, err
	}
	jobsets := dyn.Resource(jobSetResource).Namespace(e.ns)
	created, err := jobsets.Create(ctx, js, metav1.CreateOptions{})
	if err != nil {
		return run, fmt.Errorf("create JobSet %s: %w", js.GetName(), err)
	}
	if _, queued := js.GetLabels()[cluster.KueueQueueLabel]; queued {
		run.queue = &queueTrack{}
	}
	deadline := time.Now().Add(10 * time.Minute)
	killed := map[int64]bool{}
	// Every pod seen, sampled at each poll: a JobSet's restart and a
	// queue's eviction both replace them.
	pods := map[types.UID]bool{}
	var restarts int64
	for run.state == "" {
		if err := killAsked(ckpt, world, killed); err != nil {
			return run, err
		}
		if run.queue != nil {
			err = sampleQueue(ctx, e, dyn, created, run.queue, pods)
		} else {
			_, _, err = countPods(ctx, e, "jobset.sigs.k8s.io/jobset-name="+js.GetName(), pods)
		}
		if err != nil {
			return run, err
		}
		got, err := jobsets.Get(ctx, js.GetName(), metav1.GetOptions{})
		if err != nil {
			return run, err
		}
		restarts, _, _ = unstructured.NestedInt64(got.Object, "status", "restarts")
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if (m["type"] == "Completed" || m["type"] == "Failed") && m["status"] == "True" {
				run.state, run.finished = "JobSet "+m["type"].(string), time.Now()
			}
		}
		if run.state == "" && time.Now().After(deadline) {
			return run, fmt.Errorf("JobSet %s: neither Completed nor Failed after 10 min (restarts %d)", js.GetName(), restarts)
		}
		time.Sleep(200 * time.Millisecond)
	}
	run.pods = len(pods)
	if err := addRestartCounts(ctx, e, "jobset.sigs.k8s.io/jobset-name="+js.GetName(), &run); err != nil {
		return run, err
	}
	if run.state != "JobSet Completed" {
		return run, fmt.Errorf("%s %s, restarts %d", js.GetName(), run.state, restarts)
	}
	ranks, err := readRankLogs(ckpt, world)
	if err != nil {
		return run, err
	}
	run.rec, err = measureRecovery(ranks, true)
	return run, err
}

// trainingJob is the indexed Job of two pods, one rank each. With rules,
// the trainer carries the restart rules; the pod policy is Never, so that
// without them a failed rank fails its pod and the Job replaces it.
func trainingJob(e *env, name, ckpt string, port int, fault []string, withRules bool) (*batchv1.Job, error) {
	args := append([]string{"/usr/bin/python3", "/examples/train.py"}, trainArgs(fault)...)
	c := trainerContainer(args, []corev1.EnvVar{
		{Name: "WORLD_SIZE", Value: "2"}, {Name: "MASTER_ADDR", Value: "127.0.0.1"},
		{Name: "MASTER_PORT", Value: strconv.Itoa(port)},
	})
	if withRules {
		c.RestartPolicy, c.RestartPolicyRules = trainingRules()
	}
	return indexedTrainingJob(e, name, ckpt, c), nil
}

// indexedTrainingJob is an indexed Job of two pods of the trainer c.
func indexedTrainingJob(e *env, name, ckpt string, c corev1.Container) *batchv1.Job {
	two, limit := int32(2), int32(4)
	indexed := batchv1.IndexedCompletion
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: batchv1.JobSpec{
			Parallelism: &two, Completions: &two, BackoffLimit: &limit, CompletionMode: &indexed,
			Template: corev1.PodTemplateSpec{Spec: trainingPodSpec(e, ckpt, c)},
		},
	}
}

// torchrunJob is one pod of both ranks under torchrun, whose elastic agent
// restarts the whole worker group in the container, up to 3 times.
func torchrunJob(e *env, name, ckpt string, port int, fault []string) (*batchv1.Job, error) {
	// --redirects 2 --tee 2 (stderr to a file and the console): torch
	// 1.13's default, 0, fails under Debian's Python 3.11, whose IntFlag no
	// longer yields the zero member Std.NONE when iterated (torchrun exits
	// "'NoneType' object has no attribute 'get'" in to_map).
	args := append([]string{"/usr/bin/torchrun", "--nnodes", "1", "--nproc_per_node", "2", "--max_restarts", "3",
		"--redirects", "2", "--tee", "2",
		"--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:" + strconv.Itoa(port), "/examples/train.py"}, trainArgs(fault)...)
	c := trainerContainer(args, nil)
	one, limit := int32(1), int32(0)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: batchv1.JobSpec{
			Parallelism: &one, Completions: &one, BackoffLimit: &limit,
			Template: corev1.PodTemplateSpec{Spec: trainingPodSpec(e, ckpt, c)},
		},
	}, nil
}

func trainArgs(fault []string) []string {
	return append([]string{"--steps", strconv.Itoa(trainSteps), "--ckpt-every", strconv.Itoa(trainEvery),
		"--ckpt-dir", "/ckpt", "--timeout", "60", "--log-file", "/ckpt/rank{rank}.jsonl"}, fault...)
}

// memoryCkpt is where the memory rows' trainer mounts its pod's emptyDir
// of medium Memory.
const memoryCkpt = "/mem"

// inMemory keeps the checkpoint of job's trainer in an emptyDir of medium
// Memory, each rank its own; the fault marker and the log files stay in
// the node directory, so that a recreated pod still finds them.
func inMemory(job *batchv1.Job) *batchv1.Job {
	spec := &job.Spec.Template.Spec
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "mem", VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}})
	c := &spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "mem", MountPath: memoryCkpt})
	c.Args = append(c.Args, "--save-dir", memoryCkpt, "--save-per-rank")
	return job
}

func trainerContainer(args []string, env []corev1.EnvVar) corev1.Container {
	return corev1.Container{
		Name: "trainer", Image: cluster.TrainingImage, ImagePullPolicy: corev1.PullNever,
		Command: args[:1], Args: args[1:], Env: env,
		VolumeMounts: []corev1.VolumeMount{
			{Name: "ckpt", MountPath: "/ckpt"},
			{Name: "examples", MountPath: "/examples", ReadOnly: true},
		},
	}
}

func trainingPodSpec(e *env, ckpt string, c corev1.Container) corev1.PodSpec {
	spec := podSpec(corev1.RestartPolicyNever, 10, c)
	dir := corev1.HostPathDirectory
	spec.Volumes = []corev1.Volume{
		{Name: "ckpt", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: ckpt, Type: &dir}}},
		{Name: "examples", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: filepath.Join(e.repo, "examples", "training"), Type: &dir}}},
	}
	return spec
}

// runTrainingJob creates the Job, waits for it to complete and reads the
// ranks' log files; faulted runs are measured from the fault.
func runTrainingJob(ctx context.Context, e *env, job *batchv1.Job, ckpt string, world int, faulted bool) (trainingRun, error) {
	var run trainingRun
	if _, err := e.c.Client.BatchV1().Jobs(e.ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		return run, fmt.Errorf("create Job %s: %w", job.Name, err)
	}
	deadline := time.Now().Add(10 * time.Minute)
	killed := map[int64]bool{}
	why := ""
	for run.state == "" {
		if err := killAsked(ckpt, world, killed); err != nil {
			return run, err
		}
		j, err := e.c.Client.BatchV1().Jobs(e.ns).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return run, err
		}
		for _, c := range j.Status.Conditions {
			if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
				run.state, why = string(c.Type), c.Reason+": "+c.Message
			}
		}
		if run.state == "" && time.Now().After(deadline) {
			return run, fmt.Errorf("Job %s: neither Complete nor Failed after 10 min", job.Name)
		}
		time.Sleep(200 * time.Millisecond)
	}
	pods, err := e.c.Client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job.Name})
	if err != nil {
		return run, err
	}
	run.pods = len(pods.Items)
	if err := addRestartCounts(ctx, e, "batch.kubernetes.io/job-name="+job.Name, &run); err != nil {
		return run, err
	}
	if run.state != string(batchv1.JobComplete) {
		return run, fmt.Errorf("Job %s %s (%s; %d pods)", job.Name, run.state, why, run.pods)
	}
	ranks, err := readRankLogs(ckpt, world)
	if err != nil {
		return run, err
	}
	run.steps = stepStatsOf(ranks)
	run.rec, err = measureRecovery(ranks, faulted)
	return run, err
}

// The watchdog's check under load. This job's own steps take
// milliseconds, so that a whole run would pass between two polls of the
// heartbeat file and prove nothing; a step of loadStep seconds (train.py's
// --step-time) stands for a model's, and under load it is loadSlowdown
// times slower (--step-time loadSlowdown×loadStep) while loadHogs busy
// loops per CPU run on the node: a run then lasts several stall timeouts,
// each of which only the heartbeats keep from firing.
const (
	loadHogs     = 2
	loadStep     = 0.5
	loadSlowdown = 3
)

// watchdogLoad is the watchdog's check under load: the unfaulted job
// under the path's watchdog while the node's CPUs run loadHogs busy loops
// each, from before the pods start (torch's import is slower too) to the
// end. Its steps are slower; the watchdog must stop no run: the
// supervisor's log of each trainer says no stall, and each rank started
// once.
func watchdogLoad(ctx context.Context, e *env, job *batchv1.Job, ckpt string, world int) (trainingRun, error) {
	stop, err := startCPUHogs(loadHogs * runtime.NumCPU())
	if err != nil {
		return trainingRun{}, err
	}
	run, err := runTrainingJob(ctx, e, job, ckpt, world, false)
	stop()
	if err != nil {
		return run, err
	}
	pods, err := e.c.Client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job.Name})
	if err != nil {
		return run, err
	}
	beats := 0
	for _, p := range pods.Items {
		out, err := e.c.Client.CoreV1().Pods(e.ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: "trainer"}).DoRaw(ctx)
		if err != nil {
			return run, fmt.Errorf("logs of %s: %w", p.Name, err)
		}
		for line := range strings.Lines(string(out)) {
			switch {
			case strings.Contains(line, "reason=Stalled"):
				run.stalls++
			case strings.Contains(line, `msg="first heartbeat"`):
				_, after, _ := strings.Cut(line, " after=")
				d, err := time.ParseDuration(strings.TrimSpace(after))
				if err != nil {
					return run, fmt.Errorf("%s: first heartbeat after %q: %v", p.Name, after, err)
				}
				beats++
				run.firstBeat = max(run.firstBeat, d.Seconds())
			}
		}
	}
	ranks, err := readRankLogs(ckpt, world)
	if err != nil {
		return run, err
	}
	starts := 0
	for _, lines := range ranks {
		for _, l := range lines {
			if l.Event == "start" {
				starts++
			}
		}
	}
	switch {
	case run.stalls > 0 || starts != world:
		return run, fmt.Errorf("the watchdog stopped an unfaulted run: %d stalls in the supervisor's log, %d starts of %d ranks", run.stalls, starts, world)
	case beats != len(pods.Items):
		return run, fmt.Errorf("%d first heartbeats in the supervisor's log of %d pods", beats, len(pods.Items))
	}
	return run, nil
}

// startCPUHogs starts n busy loops on the node; stop ends them.
func startCPUHogs(n int) (stop func(), err error) {
	var hogs []*exec.Cmd
	stop = func() {
		for _, h := range hogs {
			_ = h.Process.Kill()
			_ = h.Wait()
		}
	}
	for range n {
		h := exec.Command("/bin/sh", "-c", "while :; do :; done")
		if err := h.Start(); err != nil {
			stop()
			return nil, fmt.Errorf("CPU hog: %w", err)
		}
		hogs = append(hogs, h)
	}
	return stop, nil
}

// addRestartCounts adds the kubelet's restartCount of every container of
// the selected pods, sidecars included, to run.
func addRestartCounts(ctx context.Context, e *env, selector string, run *trainingRun) error {
	pods, err := e.c.Client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		for _, s := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			run.kubeletRestart += s.RestartCount
		}
	}
	return nil
}

// killAsked SIGKILLs from the node every rank that asked for it with a
// kill-me line (train.py as a container's PID 1, which cannot SIGKILL
// itself): the train.py process whose start time the line names.
func killAsked(dir string, world int, done map[int64]bool) error {
	ranks, err := readRankLogs(dir, world)
	if err != nil {
		return nil // not written yet
	}
	for _, lines := range ranks {
		for _, l := range lines {
			if l.Event != "kill-me" || done[l.StartTime] {
				continue
			}
			pid, err := processStartedAt(l.StartTime, l.Rank)
			if err != nil {
				return err
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				return fmt.Errorf("kill -9 %d (rank %d): %w", pid, l.Rank, err)
			}
			done[l.StartTime] = true
			// The fault is the kill: recovery is measured from here.
			line, _ := json.Marshal(trainLine{Rank: l.Rank, Event: "killed", Time: float64(time.Now().UnixNano()) / 1e9})
			f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("rank%d.jsonl", l.Rank)), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			_, err = f.Write(append(line, '\n'))
			f.Close()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// processStartedAt finds the train.py process of rank whose start time
// (clock ticks since boot, /proc/PID/stat field 22) is ticks. The ticks
// alone are not enough: the ranks of one run start within the same 10 ms
// often enough, so the rank is read from the process's environment too.
func processStartedAt(ticks int64, rank int) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 20 || f[19] != strconv.FormatInt(ticks, 10) {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		env, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if bytes.Contains(cmd, []byte("train.py")) && rankOf(env) == rank {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no train.py process of rank %d started at tick %d", rank, ticks)
}

// rankOf is the rank train.py takes from its environment (RANK, else
// JOB_COMPLETION_INDEX, else 0), as train.py does.
func rankOf(environ []byte) int {
	vars := map[string]string{}
	for _, kv := range bytes.Split(environ, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok {
			vars[k] = v
		}
	}
	for _, k := range []string{"RANK", "JOB_COMPLETION_INDEX"} {
		if v, ok := vars[k]; ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// readRankLogs reads rank0.jsonl to rank<world-1>.jsonl of a run's directory.
func readRankLogs(dir string, world int) ([][]trainLine, error) {
	ranks := make([][]trainLine, world)
	for r := range ranks {
		f, err := os.Open(filepath.Join(dir, fmt.Sprintf("rank%d.jsonl", r)))
		if err != nil {
			return ranks, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var l trainLine
			if json.Unmarshal(sc.Bytes(), &l) == nil {
				ranks[r] = append(ranks[r], l)
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return ranks, err
		}
	}
	return ranks, nil
}

// measureRecovery: the final loss rank 0 printed and, for a faulted run,
// the seconds from the fault to the first step after the resume on the
// slower rank, and the steps done again.
func measureRecovery(ranks [][]trainLine, faulted bool) (recoveryTime, error) {
	var rec recoveryTime
	done := false
	for _, l := range ranks[0] {
		if l.Event == "done" {
			rec.finalLoss, done = l.FinalLoss, true
		}
	}
	if !done {
		return rec, errors.New("rank 0 logged no final loss")
	}
	if !faulted {
		return rec, nil
	}
	var faultAt float64
	for _, l := range ranks[trainFaultRank] {
		// A rank the node killed (killAsked) faulted when it was killed.
		if l.Event == "fault" || l.Event == "killed" {
			faultAt = l.Time
		}
	}
	if faultAt == 0 {
		return rec, fmt.Errorf("rank %d logged no fault", trainFaultRank)
	}
	for r, lines := range ranks {
		resumed, stepped := false, false
		for _, l := range lines {
			switch {
			// A start with every step done (a job run again after it
			// had finished: Kueue's re-admission of an evicted JobSet)
			// resumes nothing.
			case l.Event == "start" && l.Time > faultAt && l.ResumeFrom < trainSteps:
				resumed, rec.resumeFrom = true, l.ResumeFrom
			case resumed && l.Event == "" && l.Step > rec.resumeFrom:
				rec.seconds = max(rec.seconds, l.Time-faultAt)
				resumed, stepped = false, true
			}
		}
		if !stepped {
			return rec, fmt.Errorf("rank %d never stepped after a restart that followed the fault", r)
		}
	}
	// The steps computed again: every step a rank logged, over all its
	// runs, beyond the job's steps (the slowest rank's). With one resume
	// that is the steps between its checkpoint and the fault; a run
	// stopped again before it finished (a queue's eviction after a
	// recreation) adds the steps it redid.
	for _, lines := range ranks {
		n := 0
		for _, l := range lines {
			if l.Event == "" && l.Step > 0 {
				n++
			}
		}
		rec.stepsLost = max(rec.stepsLost, n-trainSteps)
	}
	rec.faultAt = faultAt
	return rec, nil
}

func medianOf(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(b))[0]
}

// trainingResults is what a run gave, for its report.
type trainingResults struct {
	c         *cluster.Cluster
	runs      int // runs per row
	loadStart string
	want      map[int]float64   // the unfaulted final loss per world
	pace      map[int]stepStats // the unfaulted steps' pace per world
	paths     []trainingPath    // the paths run
	faults    []trainingFault
	results   map[string]map[string][]trainingRun
	shown     map[string]string
	// prior, for a run of some paths (TRAINING_PATHS): the report as it
	// was, whose rows of the other paths are kept.
	prior *priorReport
}

// priorReport is what docs/training-<release>.md held before a run of some
// of its paths rewrote their rows.
type priorReport struct {
	rows   map[string]string // section heading + "\x00" + "| path | fault" → the row
	shown  map[string]string // "scenario title, path name:" → what the block shows
	when   string            // the line of the run that wrote the whole file
	notes  []string          // the lines of later runs of some paths
	losses map[int]string    // the unfaulted final loss per world
	pace   string            // the hang section's paceNote
}

// rowKey keys a row by its table's section and its first two cells.
func rowKey(heading, row string) string {
	cells := strings.SplitN(row, " | ", 3)
	if len(cells) < 3 {
		return ""
	}
	return heading + "\x00" + cells[0] + " | " + cells[1]
}

// priorNote begins the line of a run of some paths.
const priorNote = "Rows of "

var (
	whenLine  = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d UTC, Kubernetes `)
	lossesRe  = regexp.MustCompile(`\(2 ranks: ([^;]+); 4 ranks: ([^)]+)\)`)
	paceRe    = regexp.MustCompile(` \(the unfaulted run's: [^)]*\)`)
	noteIDsRe = regexp.MustCompile("`([a-z0-9-]+)`")
)

// parsePriorReport reads a report trainingReport wrote.
func parsePriorReport(doc string) priorReport {
	r := priorReport{rows: map[string]string{}, shown: map[string]string{}, losses: map[int]string{}}
	if m := lossesRe.FindStringSubmatch(doc); m != nil {
		r.losses[2], r.losses[4] = m[1], m[2]
	}
	r.pace = paceRe.FindString(doc)
	lines := strings.Split(doc, "\n")
	heading := ""
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case strings.HasPrefix(l, "### "):
			heading = l
		case heading == "" && whenLine.MatchString(l):
			r.when = l
		case heading == "" && strings.HasPrefix(l, priorNote):
			r.notes = append(r.notes, l)
		case strings.HasPrefix(l, "| "):
			if k := rowKey(heading, l); k != "" {
				r.rows[k] = l + "\n"
			}
		case strings.HasSuffix(l, ":") && i+2 < len(lines) && lines[i+1] == "" && lines[i+2] == "```":
			j := i + 3
			for j < len(lines) && lines[j] != "```" {
				j++
			}
			r.shown[l] = strings.Join(lines[i+3:j], "\n") + "\n"
			i = j
		}
	}
	return r
}

// withoutPaths is a note of a run of some paths without the paths in
// ran, "" when no path of it is left.
func withoutPaths(note string, ran map[string]bool) string {
	ids, rest, ok := strings.Cut(strings.TrimPrefix(note, priorNote), " (`TRAINING_PATHS`")
	if !ok {
		return note
	}
	var kept []string
	for _, m := range noteIDsRe.FindAllStringSubmatch(ids, -1) {
		if !ran[m[1]] {
			kept = append(kept, m[0])
		}
	}
	if len(kept) == 0 {
		return ""
	}
	return priorNote + strings.Join(kept, ", ") + " (`TRAINING_PATHS`" + rest
}

// The hang section's texts.
const (
	hangHeading = "### A rank that hangs: the watchdog, the liveness probe, the collective timeout"
	hangText    = "Rank 1 stops making progress at step %[1]d without exiting (`--fault-kind hang`: it sleeps), and its peers block in " +
		"their next collective: no process exits, so no exit rule can act until something ends a run. The first scenario's Job " +
		"(two pods, one rank each) unless the row says torchrun (the second scenario's two pods of two ranks). The time is " +
		"measured from the fault line rank 1 prints before it sleeps.\n\n" +
		"The watchdog (docs/supervisor.md, Hangs), where a row has it, in the rules annotation: `watchdog: {heartbeatFile: %[2]s, " +
		"firstHeartbeatSeconds: %[3]d, stallSeconds: %[4]d, gracePeriodSeconds: %[5]d}`, train.py touching the file after every step " +
		"(`--heartbeat-file %[2]s`, each pod's own file). The torchrun row's watches the ranks' output instead, " +
		"`outputPattern: '%[6]s'` (the JSON line train.py prints each step, which torchrun passes through from its workers), with " +
		"the same bounds. A step here takes milliseconds%[9]s: %[4]d s without a heartbeat is a hang, not a slow step (a step " +
		"%[10]g× as slow as one of %[11]g s keeps the watchdog quiet under CPU load: the check below), and the first " +
		"heartbeat, after torch's import and the rendezvous, may take %[3]d s. A stall is judged as exit code 124, which the " +
		"rows' rules match: `RestartGroup` on 1, 42 and 124 (torchrun's on 1 and 124), or `Restart` on 1, 42 and 124 for the " +
		"row without a group.\n\n" +
		"The liveness row has no supervisor: the kubelet's exec probes on the same file every second, " +
		"`test $(( $(date +%%s) - $(stat -c %%Y %[2]s) )) -lt %[8]d`, a startup probe (up to %[3]d failures: the watchdog's " +
		"first heartbeat) and a liveness probe with the default `failureThreshold: 3` (no heartbeat for %[4]d s, the watchdog's " +
		"stall) and `terminationGracePeriodSeconds: %[5]d`, under the pod's `restartPolicy: OnFailure`: a probe's kill follows " +
		"the restart policy, no rule. Not `failureThreshold: 1`: the kubelet of 1.37.2 runs the liveness probe once in the " +
		"new container before its startup probe has passed (kubernetes/kubernetes#141155; fixed upstream by #141342, not in 1.37.2), which then kills " +
		"it: in a trial run with it, rank 0's new container was killed a second after its start, finished the run with " +
		"rank 1 within the kill's grace period, and was restarted all the same (the kill decided the restart), so that its " +
		"third container waited for a peer that had finished, killed by its startup probe each minute, until the Job failed " +
		"(BackoffLimitExceeded). The last row detects nothing: rank 0's collective times out after train.py's `--timeout %[7]d` (this " +
		"harness's; the process group's default is 10 min for NCCL and 30 min for gloo, which that row's time then grows " +
		"by), rank 0 exits 1 and `RestartGroup` on 1 restarts both ranks."
	hangDiffers = "What differs. Every row loses the same steps (back to the checkpoint of step 20) and ends with the unfaulted " +
		"loss; the rows differ in when the hang is noticed and in what restarts. Both ranks' heartbeats stop at the hang " +
		"(rank 0 waits in the collective), so the watchdogs of both ranks fire within a poll of each other, " +
		"the stall plus at most a second: under `RestartGroup` each asks for its group's restart and the node agent restarts " +
		"the group once (`restart-injector status` below: both ranks' last exit `124 (Stalled)`, one group restart); under " +
		"`Restart` each rank restarts in place on its own 124. Neither moves the kubelet's restartCount, and no back-off " +
		"applies to a first restart. torchrun's row adds torchrun's own start (the agents' rendezvous, then the workers' " +
		"imports). The liveness row notices at the same time, but the kill is the kubelet's: the stop signal, which train.py " +
		"as the container's PID 1 ignores, the whole grace period, SIGKILL, and a new container; restartCount moves once per " +
		"rank, and a container killed again would wait CrashLoopBackOff's 10 s, 20 s, … first. Both ranks restart only " +
		"because both probes watch a heartbeat the hang stops: a probe restarts its own container and no other, and a peer " +
		"whose probe does not fail (a heartbeat written by another thread, or no probe) waits in its collective until its " +
		"timeout, as the last row's rank 0 does: it notices nothing for the 60 s of its collective timeout, and only its exit " +
		"1 then asks for the group restart that stops the hung rank too (its last exit `143 (SIGTERM)`, the group's stop)."
	loadText = "**The watchdog under CPU load.** The first row's job and watchdog, unfaulted, with steps %[4]g× as slow as a " +
		"step of %[5]g s while %[1]d busy loops per CPU run on the node, from before the pods start to the end. This job's own " +
		"steps take milliseconds (the table's unfaulted step) and a whole run would pass between two polls of the heartbeat " +
		"file, so a step of %[5]g s stands for a model's, and `--step-time %[6]g` (train.py's extra time per step) makes it " +
		"%[4]g× as slow; a run then lasts several stall timeouts, each of which only the heartbeats keep from firing. torch's " +
		"import is slower under the busy loops too, and the watchdog must " +
		"stop no run (no `reason=Stalled` in either trainer's supervisor log, each rank started once). The first heartbeat is " +
		"the supervisor's own measure (its log's `first heartbeat … after`), from the start of train.py to the poll that saw " +
		"its first step's touch (the file is looked at every second), against `firstHeartbeatSeconds: %[2]d`; the longest gap between two heartbeats is against `stallSeconds: %[3]d`."
)

// trainingReport renders docs/training-<release>.md from the run; for a
// run of some paths, with the rows of the others as they were.
func trainingReport(r trainingResults) string {
	c, prior := r.c, r.prior
	ran := map[string]bool{}
	for _, p := range r.paths {
		ran[p.id] = true
	}
	paths := r.paths
	if prior != nil {
		paths = trainingPaths()
	}
	loss := func(world int) string {
		if w, ok := r.want[world]; ok {
			return strconv.FormatFloat(w, 'g', -1, 64)
		}
		if prior != nil && prior.losses[world] != "" {
			return prior.losses[world]
		}
		return "not run"
	}
	// row is the row of a path and fault: this run's, or the prior one.
	row := func(heading string, p trainingPath, f trainingFault, render func() string) string {
		if ran[p.id] {
			return render()
		}
		if prior != nil {
			return prior.rows[rowKey(heading, "| "+p.name+" | "+f.name+" | ")]
		}
		return ""
	}
	notIn := func(p trainingPath) bool { return p.since > 0 && cluster.Minor(c.KubeVersion) < p.since }

	var b strings.Builder
	now := time.Now().UTC().Format("2006-01-02 15:04 MST")
	fmt.Fprintf(&b, "## Kubernetes %s\n\n", c.KubeVersion)
	b.WriteString("Written by `make training` (`go test -tags training ./test/e2e -run TestTrainingOnKubelet -update-training`), not by hand.\n")
	if prior == nil {
		fmt.Fprintf(&b, "%s, Kubernetes %s (kubelet, API server, Job controller; containerd), %d CPUs, %s/%s, load average %s at the start and %s at the end.\n\n",
			now, c.KubeVersion, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, r.loadStart, loadAverage())
	} else {
		var ids []string
		for _, p := range r.paths {
			ids = append(ids, "`"+p.id+"`")
		}
		b.WriteString(prior.when + "\n")
		// A later run of a path takes it out of an earlier run's note.
		for _, n := range prior.notes {
			if n = withoutPaths(n, ran); n != "" {
				b.WriteString(n + "\n")
			}
		}
		fmt.Fprintf(&b, "%s%s (`TRAINING_PATHS`, `TRAINING_RUNS=%d`): %s, %d CPUs, load average %s at the start and %s at the end.\n\n",
			priorNote, strings.Join(ids, ", "), r.runs, now, runtime.NumCPU(), r.loadStart, loadAverage())
	}
	fmt.Fprintf(&b, "The job: [examples/training/train.py](../examples/training/train.py), DDP over gloo, %d steps, a checkpoint every %d,\n"+
		"seeded synthetic data, in the image `hack/training-rootfs.sh` builds (Debian bookworm, `python3-torch` 1.13.1, no registry).\n"+
		"Every pod is on the host network (the rendezvous on 127.0.0.1), the checkpoints in a node directory (hostPath) so that a\n"+
		"replaced pod finds them too. Every run must end with the final loss of an unfaulted run of as many ranks, bit for bit\n"+
		"(2 ranks: %v; 4 ranks: %v): a run that does not is counted failed.\n"+
		"A rank that is SIGKILLed kills itself where it can (under the supervisor and under torchrun it is not its PID namespace's\n"+
		"init); as a container's PID 1 it cannot (the kernel drops the signal), so the harness SIGKILLs it from the node, as the OOM\n"+
		"killer would, and the time is measured from that kill. The rules, where a path has them: `Restart` on exit codes 1, 42 and 137 (the\n"+
		"faulting rank's 42 or SIGKILL's 137, and 1, the peer's Python error when gloo loses its connection, which came within seconds:\n"+
		"no collective timeout was reached). Each path runs as a user writes it, with its defaults (the crash back-off of the\n"+
		"supervisor and of the kubelet, the Job controller's pod-failure back-off). The node runs no scheduler (pods name\n"+
		"their node) and holds every image: a replaced pod costs no scheduling and no image pull here, so the rows that recreate\n"+
		"pods are a floor of what they cost on a cluster.\n\n",
		trainSteps, trainEvery, loss(2), loss(4))
	const tableHead = "| Path | Fault | Runs | Fault → first step after resume, median | worst | Steps lost | Final loss = unfaulted | Pods created | restartCount | Job |\n|---|---|---|---|---|---|---|---|---|---|\n"
	for _, sc := range trainingScenarios {
		heading := "### " + sc.title
		var rows strings.Builder
		for _, p := range paths {
			if p.scenario != sc || !slices.ContainsFunc(r.faults, func(f trainingFault) bool { return !f.hang && !f.load && p.runs(f) }) {
				continue
			}
			if notIn(p) {
				fmt.Fprintf(&rows, "| %s | – | 0 | not in %s (from 1.%d) | – | – | – | – | – | – |\n", p.name, c.KubeVersion, p.since)
				continue
			}
			for _, f := range r.faults {
				if !f.hang && !f.load && p.runs(f) {
					rows.WriteString(row(heading, p, f, func() string {
						if sc.queue {
							return queueRow(p, f, r.results[p.id][f.name])
						}
						return trainingRow(p, f, r.results[p.id][f.name])
					}))
				}
			}
		}
		if rows.Len() > 0 {
			text, head := fmt.Sprintf(sc.text, trainFault), tableHead
			if sc.queue {
				text = fmt.Sprintf(sc.text, trainFault, kueuePodsReadyTimeout, kueueRecoveryTimeout, kueueRequeueBase, kueueReadyFile, kueueLoad, kueueStep)
				head = queueHead
			}
			fmt.Fprintf(&b, "%s\n\n%s\n\n%s%s\n", heading, text, head, rows.String())
		}
	}

	var hangRows, loadRows strings.Builder
	for _, p := range paths {
		if notIn(p) {
			continue
		}
		for _, f := range r.faults {
			switch {
			case f.hang && p.runs(f):
				hangRows.WriteString(row(hangHeading, p, f, func() string { return trainingRow(p, f, r.results[p.id][f.name]) }))
			case f.load && p.runs(f):
				loadRows.WriteString(row(hangHeading, p, f, func() string { return loadRow(p, f, r.results[p.id][f.name], r.pace[p.scenario.world]) }))
			}
		}
	}
	if hangRows.Len() > 0 || loadRows.Len() > 0 {
		// The pace the hang rows were judged against: a run without them
		// keeps the one of the run that had them.
		pace := paceNote(r.pace[2])
		if prior != nil && !slices.ContainsFunc(r.paths, func(p trainingPath) bool {
			return slices.ContainsFunc(r.faults, func(f trainingFault) bool { return (f.hang || f.load) && p.runs(f) })
		}) {
			pace = prior.pace
		}
		fmt.Fprintf(&b, "%s\n\n%s\n\n", hangHeading, fmt.Sprintf(hangText, trainFault, hangHeartbeat, hangFirstBeat, hangStall, hangGrace, hangPattern, 60, livenessAge,
			pace, float64(loadSlowdown), loadStep))
		if hangRows.Len() > 0 {
			fmt.Fprintf(&b, "%s%s\n", tableHead, hangRows.String())
			if hangDiffers != "" {
				b.WriteString(hangDiffers + "\n\n")
			}
		}
		if loadRows.Len() > 0 {
			fmt.Fprintf(&b, loadText+"\n\n", loadHogs, hangFirstBeat, hangStall, float64(loadSlowdown), loadStep, loadSlowdown*loadStep)
			b.WriteString("| Path | Check | Runs | Step, median: unfaulted → under load | Longest gap between heartbeats, worst | First heartbeat, worst | Stalls | Final loss = unfaulted | Job |\n" +
				"|---|---|---|---|---|---|---|---|---|\n")
			b.WriteString(loadRows.String() + "\n")
		}
	}

	b.WriteString("### What `kubectl get pods` and `restart-injector status` show\n\n" +
		"After the first successful run of each path, as a user would type them (`restart-injector status` for the supervised\n" +
		"paths: the node agent's Events; the node runs one agent for every path).\n\n")
	for _, p := range paths {
		head := p.scenario.title + ", " + p.name + ":"
		out, ok := r.shown[p.id]
		if !ran[p.id] && prior != nil {
			out, ok = prior.shown[head]
		}
		if ok {
			fmt.Fprintf(&b, "%s\n\n```\n%s```\n\n", head, out)
		}
	}
	return b.String()
}

// paceNote is the unfaulted run's pace of two ranks, "" when not run.
func paceNote(pace stepStats) string {
	if pace.median == 0 {
		return ""
	}
	return fmt.Sprintf(" (the unfaulted run's: %.1f ms, median, and %.0f ms between two heartbeats at the longest, "+
		"a checkpoint's step)", 1000*pace.median, 1000*pace.longest)
}

// loadRow is the row of the watchdog's check under load.
func loadRow(p trainingPath, f trainingFault, rs []trainingRun, unfaulted stepStats) string {
	var steps []float64
	longest, first := 0.0, 0.0
	stalls, failed, ok := 0, 0, 0
	states := map[string]bool{}
	for _, r := range rs {
		stalls += r.stalls
		if r.err != nil {
			failed++
			continue
		}
		ok++
		steps = append(steps, r.steps.median)
		longest, first = max(longest, r.steps.longest), max(first, r.firstBeat)
		states[r.state] = true
	}
	runsCell := strconv.Itoa(len(rs))
	if failed > 0 {
		runsCell += fmt.Sprintf(" (%d failed)", failed)
	}
	if len(steps) == 0 {
		return fmt.Sprintf("| %s | %s | %s | – | – | – | %d | – | – |\n", p.name, f.name, runsCell, stalls)
	}
	// The step it stands for: loadStep and the unfaulted run's own.
	m, normal := medianOf(steps), loadStep+unfaulted.median
	return fmt.Sprintf("| %s | %s | %s | %.3f s (%g s + %.1f ms) → %.3f s (%.2f×) | %.2f s | %.2f s | %d | %d of %d | %s |\n", p.name, f.name, runsCell,
		normal, loadStep, 1000*unfaulted.median, m, m/normal, longest, first, stalls, ok, len(rs), joinKeys(states))
}

// trainingRow is one row of a scenario's table.
func trainingRow(p trainingPath, f trainingFault, rs []trainingRun) string {
	var secs []float64
	worst := 0.0
	pods, restarts := map[int]bool{}, map[int32]bool{}
	states := map[string]bool{}
	lost, failed := 0, 0
	for _, r := range rs {
		if r.err != nil {
			failed++
			continue
		}
		secs = append(secs, r.rec.seconds)
		worst = max(worst, r.rec.seconds)
		pods[r.pods], restarts[r.kubeletRestart], states[r.state] = true, true, true
		lost = r.rec.stepsLost
	}
	runsCell := strconv.Itoa(len(rs))
	if failed > 0 {
		runsCell += fmt.Sprintf(" (%d failed)", failed)
	}
	if len(secs) == 0 {
		return fmt.Sprintf("| %s | %s | %s | – | – | – | – | – | – | – |\n", p.name, f.name, runsCell)
	}
	// Every run counted here ended with the unfaulted loss (a run that
	// did not is a failed run).
	return fmt.Sprintf("| %s | %s | %s | %.2f s | %.2f s | %d | %d of %d | %s | %s | %s |\n", p.name, f.name, runsCell, medianOf(secs), worst, lost,
		len(secs), len(rs), joinInts(pods), joinInt32s(restarts), joinKeys(states))
}

// writeTrainingIndex writes docs/training.md: every release's table
// (docs/training-v*.md, newest first) and the recipe.
func writeTrainingIndex(docs string) error {
	index, err := trainingIndex(docs)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(docs, "training.md"), []byte(index), 0o644)
}

// trainingIndex is docs/training.md as writeTrainingIndex writes it.
func trainingIndex(docs string) (string, error) {
	files, err := filepath.Glob(filepath.Join(docs, "training-v*.md"))
	if err != nil {
		return "", err
	}
	sort.Slice(files, func(i, j int) bool { return cluster.Minor(versionOf(files[i])) > cluster.Minor(versionOf(files[j])) })
	var b strings.Builder
	b.WriteString("# Distributed training on a real kubelet: recovery from a rank's fault, path by path\n\n" +
		"Written by `make training` from the runs below, one file per release (docs/training-<release>.md), not by hand.\n" +
		"The same job under the supervisor as processes on loopback: [training-process.md](training-process.md); under Docker:\n" +
		"`examples/training/docker.sh`.\n\n")
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		b.Write(body)
		b.WriteString("\n")
	}
	b.WriteString(trainingRecipe)
	return b.String(), nil
}

// versionOf is the release of docs/training-v1.37.2.md.
func versionOf(file string) string {
	return strings.TrimSuffix(strings.TrimPrefix(filepath.Base(file), "training-"), ".md")
}

func joinInts(m map[int]bool) string {
	var s []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		s = append(s, strconv.Itoa(k))
	}
	return strings.Join(s, ", ")
}

func joinInt32s(m map[int32]bool) string {
	var s []string
	for k := range m {
		s = append(s, strconv.Itoa(int(k)))
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

func joinKeys(m map[string]bool) string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

const trainingRecipe = `## Reading the table

- **Pods created** counts the Job's pods at the end: 2 when no pod was replaced (1 for torchrun's single pod); a JobSet's
  rows count 2 per attempt (its recreated Jobs' pods are deleted).
- **restartCount** is the kubelet's, summed over every container of the pods, sidecars included: the in-place restarts of
  the supervisor never move it (docs/supervisor.md); the kubelet's own restarts do, once per container restarted.
- **Steps lost** are the steps done again: every step a rank computed beyond the job's, over all its runs (the slowest
  rank's); with one restart, those from the last checkpoint to the fault.
- **Final loss = unfaulted**: runs that ended with the unfaulted run's final loss, bit for bit, of all runs of the row.
- Where a path restarts at once (the first crash restart of the kubelet and of the supervisor has no back-off), most of the
  recovery is Python importing torch and joining the new rendezvous; the supervisor's own restart is under a millisecond
  (docs/benchmarks.md). The Job controller waits its pod-failure back-off (10 s, doubling) before it creates the
  replacement pods. ` + "`podFailurePolicy`" + `'s ` + "`Ignore`" + ` keeps a failure from counting against ` + "`backoffLimit`" + `; the
  replacement pods of its rows still come seconds later, as the table shows.

## Recipes: manifests to copy

Four complete manifests, each checked in ` + "`make test`" + ` through the real binary by ` + "`inject`" + ` and ` + "`explain`" + `
(` + "`cmd/restart-injector/recipes_test.go`" + `): apply them with the webhook installed (README, "Install"), or pipe them
through ` + "`restart-injector inject -f FILE | kubectl apply -f -`" + ` without it. Each restarts a rank in place on the
retriable exit codes, and ends a rank that hangs with the watchdog ([supervisor.md](supervisor.md#hangs-the-watchdog)),
whose stall is judged as exit 124 and restarted by the same rule.

| file | kind | on a fault | hang detection | where RANK, WORLD_SIZE, MASTER_ADDR come from |
|---|---|---|---|---|
| [job.yaml](../examples/training/recipes/job.yaml) | indexed Job + headless Service | ` + "`Restart`" + ` the rank (its peers fail their next collective with exit 1 and restart too) | a heartbeat file the loop touches each step (one line of code: ` + "`--heartbeat-file`" + `, ` + "`HEARTBEAT_FILE`" + ` in train.py) | ` + "`RANK`" + ` from ` + "`JOB_COMPLETION_INDEX`" + `, ` + "`WORLD_SIZE`" + ` set, ` + "`MASTER_ADDR`" + ` the pod of index 0 by the Service's DNS name (` + "`trainer-0.trainer`" + `: ` + "`subdomain`" + ` on the pod) |
| [jobset.yaml](../examples/training/recipes/jobset.yaml) | JobSet | ` + "`RestartGroup`" + `: every pod of the JobSet in place | the loop's own output (` + "`\"step\": N`" + ` lines): no code change | as the Job; ` + "`MASTER_ADDR`" + ` JobSet's DNS name (` + "`trainer-workers-0-0.trainer`" + `, ` + "`network.enableDNSHostnames`" + `) |
| [pytorchjob.yaml](../examples/training/recipes/pytorchjob.yaml) | Kubeflow PyTorchJob (kubeflow.org/v1) | ` + "`RestartGroup`" + `: the PyTorchJob's pods (` + "`training.kubeflow.org/job-name`" + `) | the output | the operator sets all four (` + "`MASTER_ADDR`" + ` is the master's Service) |
| [trainjob.yaml](../examples/training/recipes/trainjob.yaml) | Kubeflow Trainer v2 TrainingRuntime + TrainJob | ` + "`RestartGroup`" + ` on torchrun's 1 | the output, as torchrun passes the ranks' on | Trainer sets torchrun's ` + "`PET_NNODES`" + `, ` + "`PET_NODE_RANK`" + `, ` + "`PET_MASTER_ADDR`" + `; the rules go on the runtime's pod template, since a TrainJob's pods come from it |

What each needs that is easy to miss:

- **RANK and WORLD_SIZE.** A plain DDP script reads ` + "`RANK`" + ` and ` + "`WORLD_SIZE`" + ` (` + "`init_process_group`" + ` fails with
  "environment variable RANK expected, but not set" otherwise). A Job gives only ` + "`JOB_COMPLETION_INDEX`" + `: export it
  as ` + "`RANK`" + ` in the command, as job.yaml does; the training operator and Trainer set their own.
- **MASTER_ADDR on a real cluster** is a name every rank can resolve, not 127.0.0.1 (every run of the tables above
  uses the host network of one machine): a headless Service and the pod's ` + "`subdomain`" + ` for a Job, JobSet's DNS names,
  the operator's variables.
- **A PyTorchJob replica without ` + "`restartPolicy`" + ` gets ` + "`OnFailure`" + `** (the operator's default, injector/podpolicy.go):
  the pod's policy then restarts an exit outside the rules, and the pod never fails. Set ` + "`restartPolicy: Never`" + ` on
  every replica spec, as the recipe does; ` + "`explain`" + ` prints the policy the controller will set.
- **The watchdog's timeouts**: ` + "`firstHeartbeatSeconds`" + ` for loading the model and the data, ` + "`stallSeconds`" + ` above the
  slowest step you expect, under load too (a step three times slower than usual must not look like a hang), and well
  under the collective's own timeout (NCCL 10 min, gloo 30 min by default), or the peers fail first with exit 1.
- **Unused, the watchdog costs nothing measurable**: without a ` + "`watchdog`" + ` in the config no timer, no poll and no pipe
  exist. Before it (194e7b1) and with it (main of 2026-12-06), three interleaved rounds: ` + "`restart-supervisor -- true`" + `
  5.11, 4.96, 5.20 ms against 5.09, 5.12, 4.92 ms per run (300 runs a round); ` + "`BenchmarkRestartCycle`" + ` 1.054, 1.082,
  0.961 ms against 1.032, 1.080, 1.036 ms per in-place restart; the stripped binary 45,056 bytes larger (3,649,698 →
  3,694,754 B).

## A recipe, step by step

- Put the exit codes your job fails with retriably in the rules, and the peers' code too: when one gloo or NCCL rank dies,
  the others fail their next collective with a Python error (exit 1 here) long before the collective timeout, so a rule on
  the faulting rank's code alone leaves the peers to the pod policy.
- Under torchrun, the container's exit is torchrun's, and torchrun exits 1 whatever its worker's code (a worker's 42 or
  SIGKILL included): the rule is on 1, and torchrun's ` + "`--max-restarts 0`" + ` hands every failure to it. Across pods, give
  torchrun the static rendezvous (` + "`--rdzv_backend static`" + `, the node rank from the completion index in ` + "`PET_NODE_RANK`" + `)
  when the pods share a hostname (the host network): torch 1.13's c10d rendezvous names a node by hostname and PID, the
  same for two agents that are each PID 1 of their container, and then waits for a second node forever.
- Write checkpoints to a volume that outlives the container (an emptyDir survives in-place restarts and the kubelet's;
  a replaced pod needs a PersistentVolume or, as here, a node directory) and resume from the newest at every start; the
  supervisor gives the workload ` + "`RESTART_SUPERVISOR_RESTART_COUNT`" + ` and the last exit code (docs/supervisor.md).
- Seed the data by step and rank, as train.py does, and a resumed run reaches the unfaulted final loss exactly.
- With a Job: keep ` + "`restartPolicy: Never`" + ` on the pod and the rules on the trainer; ` + "`podFailurePolicy`" + ` sees only the exits the
  rules hand to the kubelet. With a JobSet: the rules restart a rank in place before the JobSet's ` + "`failurePolicy`" + ` would
  recreate every Job (the supervised JobSet rows: 0 JobSet restarts); ` + "`failurePolicy.maxRestarts`" + ` then counts only what
  the rules did not handle. ` + "`restart-injector inject`" + ` and the webhook take the JobSet as it is.
- To restart every rank together rather than the one that failed (its peers then never see a broken collective):
  ` + "`RestartGroup`" + ` in the annotation carrier, with the node agent's group restarts on (docs/gang.md). The Job's pods
  form one group by their ` + "`batch.kubernetes.io/job-name`" + ` label; the rows above ran it with one node agent.
- A rank that hangs exits nothing, and its peers wait in their collective until its timeout (10 min for NCCL, 30 min
  for gloo by default). The watchdog (the manifests above) turns the stall into exit code 124 for the same rules, about
  ` + "`stallSeconds`" + ` after the last heartbeat (the hang rows above). A liveness probe on the same heartbeat notices as soon,
  but its kill is the kubelet's (restartCount, CrashLoopBackOff, the whole grace period of a PID 1 that ignores
  SIGTERM), it restarts its own container only, and on 1.37.2 it wants ` + "`failureThreshold`" + ` above 1.
- To restart a pod's sidecars with the trainer (a data loader whose state belongs to the attempt):
  ` + "`RestartAllContainers`" + ` on the trainer's rule: natively from 1.36 (1.35 with its alpha gates; KEP-5532), under the
  supervisor on any release.
- ` + "`make training`" + ` runs this on the release in KUBE_BIN_DIR; TRAINING_RUNS sets the runs per row, TRAINING_PATHS
  (path ids) a subset of the paths: with -update-training it rewrites their rows (and their ` + "`kubectl get pods`" + ` blocks)
  and keeps the others', with a line saying when which rows were run.
`

// startTrainingAgent installs the GroupRestart CRD and runs a node agent
// with group restarts for the node, as deploy/components/node-agent-groups
// does on a cluster, with a pod of the agent's DaemonSet standing in for
// it on the node, which `restart-injector status` looks for.
func startTrainingAgent(ctx context.Context, t *testing.T, c *cluster.Cluster, binDir, repo string) {
	installGroupCRD(ctx, t, c, binDir, repo)
	standInForAgent(ctx, t, c)
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	startE2EGroupAgent(ctx, t, c.Client, dyn, cluster.NodeName, filepath.Join(c.KubeletRoot(), "pods"), slog.LevelWarn)
}
