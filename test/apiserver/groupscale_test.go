package apiserver_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/internal/testutil"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
)

// The group-restart scale harness (docs/gang.md, "At scale"): N simulated
// nodes, each one pod of one group, each node the real node-agent code
// (nodeagent.Run, in this process, at its default intervals) over a pods
// directory of its own, each pod's container the real restart-supervisor
// binary with its own state volume, all against one real etcd and
// kube-apiserver (the release of test/apiserver). Rank 0 exits 42 once a
// round; every rank restarts once. Measured per round: the time from rank
// 0's exit to the last rank's start, the API server's writes of the
// coordination's objects (GroupRestart and GroupRestartReport) and of the
// whole server, the watch events it sent for those objects, and its CPU
// seconds and resident memory, from its own /metrics. GROUPSCALE_SIZES
// sets the sizes (default 8,16,32,64), GROUPSCALE_ROUNDS the rounds
// (default 3); `make groupscale` runs it, `make test` a size of 8
// (TestGroupScaleSmall) with the bound on its writes.

// groupRound is one measured round.
type groupRound struct {
	restart         time.Duration // rank 0's exit → the last rank's start
	groupWrites     int           // writes of grouprestarts and grouprestartreports that succeeded
	groupRefused    int           // those refused (a conflict of two writers)
	allWrites       int           // every mutating request of the round
	groupWatchEvent int           // watch events sent for those two resources
	apiCPU          float64       // the API server's CPU seconds during the round
	apiRSS          float64       // its resident memory at the round's end, bytes
	agentsCPU       float64       // this process's CPU seconds during the round: the n agents (and the harness's polls)
	agentsRSS       float64       // this process's resident memory at the round's end, bytes
	load            float64       // the machine's 1-minute load average at the round's end
}

// runGroupScale runs rounds rounds of a group of n pods on n simulated
// nodes and returns them.
func runGroupScale(t *testing.T, n, rounds int) []groupRound {
	return runGroupScaleWith(t, n, rounds, false)
}

// runGroupScaleWith is runGroupScale whose members are, with standIn, the
// stand-in of standin_test.go instead of the real supervisor.
func runGroupScaleWith(t *testing.T, n, rounds int, standIn bool) []groupRound {
	env, client, dir, bin := startGroupTest(t)
	if v, err := client.Discovery().ServerVersion(); err == nil {
		scaleAPIVersion = v.GitVersion
	}
	// The agents publish their Event-signing keys there.
	_, err := client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentapi.AgentNamespace}}, metav1.CreateOptions{})
	must(t, err)
	group := fmt.Sprintf("scale-%d", n)
	dyn, err := dynamic.NewForConfig(env.Config)
	must(t, err)
	gauge := &testutil.SyncBuffer{}
	type member struct {
		log  string
		exit string // rank 0: the file whose appearance makes it exit 42
	}
	var members []member
	var sims *standIns
	if standIn {
		sims = startStandIns(t)
	} else {
		raiseInotifyInstances(t, 2*n+16)
	}
	for i := 0; i < n; i++ {
		node := fmt.Sprintf("node-%04d", i)
		podsDir := filepath.Join(dir, node, "pods")
		must(t, os.MkdirAll(podsDir, 0o750))
		p := groupPod(t, client, "default", fmt.Sprintf("rank-%04d", i), node, group, "")
		startGroupAgentEvery(t, env.Config, node, podsDir, 0, 0) // the agent's defaults
		m := member{log: filepath.Join(dir, p.Name+".log"), exit: filepath.Join(dir, "exit")}
		// Each run logs its start; rank 0's run k exits 42 once the
		// file exit.k exists, every other run waits to be stopped (in a
		// sleep it ends with itself: no process a second to fork).
		script := fmt.Sprintf(`echo "start $(date +%%s%%N)" >> %[1]s
k=$(grep -c start %[1]s)
trap 'kill $s 2>/dev/null; exit 0' TERM
if [ %[2]d = 0 ]; then while [ ! -e %[3]s.$k ]; do sleep 0.05; done; echo "exit $(date +%%s%%N)" >> %[1]s; exit 42; fi
sleep 100000 & s=$!; wait`, m.log, i, m.exit)
		if standIn {
			sims.add(t, stateDir(t, podsDir, p.UID), m.log)
		} else {
			startMember(t, bin, stateDir(t, podsDir, p.UID), script, gauge)
		}
		members = append(members, m)
	}
	runs := func(m member) (starts, exits []time.Time) {
		f, err := os.Open(m.log)
		if err != nil {
			return nil, nil
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			what, ns, ok := strings.Cut(sc.Text(), " ")
			v, err := strconv.ParseInt(ns, 10, 64)
			if !ok || err != nil {
				continue
			}
			switch what {
			case "start":
				starts = append(starts, time.Unix(0, v))
			case "exit":
				exits = append(exits, time.Unix(0, v))
			}
		}
		return starts, exits
	}
	started := func(k int) bool {
		for _, m := range members {
			if s, _ := runs(m); len(s) < k {
				return false
			}
		}
		return true
	}
	waitFor(t, "every rank's first run", 2*time.Minute, func(context.Context) (bool, error) { return started(1), nil })
	// The agents list their nodes' pods and watch the group before the
	// first round.
	time.Sleep(2 * time.Second)
	var out []groupRound
	for r := 1; r <= rounds; r++ {
		before := apiCounts(t, env.Config)
		cpuBefore := selfCPU(t)
		if standIn {
			sims.exit(t, 0, r)
		} else {
			must(t, os.WriteFile(fmt.Sprintf("%s.%d", members[0].exit, r), nil, 0o644))
		}
		waitFor(t, fmt.Sprintf("round %d of %d ranks", r, n), 3*time.Minute, func(context.Context) (bool, error) { return started(r + 1), nil })
		// The agents finish the round after the starts: every node's
		// second report, then the coordinator's done, which the
		// round's counts must hold (at 1,000 nodes a fixed second
		// after the last start missed up to a third of the reports).
		waitFor(t, fmt.Sprintf("round %d marked done", r), time.Minute, func(ctx context.Context) (bool, error) {
			o, err := dyn.Resource(agentapi.GroupResource).Namespace("default").Get(ctx, agentapi.GroupObjectName(contract.LabelGroup+"="+group), metav1.GetOptions{})
			return err == nil && agentapi.GroupFromObject(o).Done >= uint64(r), nil
		})
		time.Sleep(200 * time.Millisecond) // the agents' Events of the round
		after := apiCounts(t, env.Config)
		_, exits := runs(members[0])
		var last time.Time
		for _, m := range members {
			s, _ := runs(m)
			if s[r].After(last) {
				last = s[r]
			}
		}
		out = append(out, groupRound{restart: last.Sub(exits[r-1]),
			groupWrites: after.groupWrites - before.groupWrites, groupRefused: after.groupRefused - before.groupRefused,
			allWrites:       after.allWrites - before.allWrites,
			groupWatchEvent: after.groupWatch - before.groupWatch,
			apiCPU:          after.cpu - before.cpu, apiRSS: after.rss,
			agentsCPU: selfCPU(t) - cpuBefore, agentsRSS: selfRSS(t), load: loadAverage(t)})
		o := out[r-1]
		t.Logf("%d ranks, round %d: exit → last start %s, coordination writes %d (and %d refused), all writes %d, coordination watch events %d, API server CPU %.2f s, RSS %.0f MiB; agents CPU %.2f s, RSS %.0f MiB; load %.1f",
			n, r, o.restart.Round(time.Millisecond), o.groupWrites, o.groupRefused, o.allWrites, o.groupWatchEvent,
			o.apiCPU, o.apiRSS/(1<<20), o.agentsCPU, o.agentsRSS/(1<<20), o.load)
	}
	return out
}

// scaleAPIVersion is the version of the API server the harness last ran
// against.
var scaleAPIVersion string

// apiTotals are counters of the API server's /metrics.
type apiTotals struct {
	groupWrites, groupRefused, allWrites, groupWatch int
	cpu, rss                                         float64
}

// apiCounts reads the API server's request and watch-event counters.
func apiCounts(t *testing.T, cfg *rest.Config) apiTotals {
	t.Helper()
	client, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	body, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	must(t, err)
	var c apiTotals
	for _, l := range strings.Split(string(body), "\n") {
		name, labels, value, ok := parseSample(l)
		if !ok {
			continue
		}
		switch name {
		case "apiserver_request_total":
			if !slices.Contains([]string{"CREATE", "UPDATE", "PATCH", "DELETE", "POST", "PUT"}, labels["verb"]) {
				continue
			}
			c.allWrites += int(value)
			if labels["resource"] == "grouprestarts" || labels["resource"] == "grouprestartreports" {
				if strings.HasPrefix(labels["code"], "2") {
					c.groupWrites += int(value)
				} else {
					c.groupRefused += int(value)
				}
			}
		case "apiserver_watch_events_total":
			if strings.Contains(labels["kind"], "GroupRestart") || strings.HasPrefix(labels["resource"], "grouprestart") {
				c.groupWatch += int(value)
			}
		case "process_cpu_seconds_total":
			c.cpu = value
		case "process_resident_memory_bytes":
			c.rss = value
		}
	}
	return c
}

// parseSample reads one line of the Prometheus text format: name, labels,
// value.
func parseSample(l string) (string, map[string]string, float64, bool) {
	if l == "" || l[0] == '#' {
		return "", nil, 0, false
	}
	i := strings.IndexAny(l, "{ ")
	if i < 0 {
		return "", nil, 0, false
	}
	name, rest := l[:i], l[i:]
	labels := map[string]string{}
	if strings.HasPrefix(rest, "{") {
		j := strings.LastIndex(rest, "}")
		if j < 0 {
			return "", nil, 0, false
		}
		for _, kv := range strings.Split(rest[1:j], ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				labels[k] = strings.Trim(v, `"`)
			}
		}
		rest = rest[j+1:]
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
	if err != nil {
		return "", nil, 0, false
	}
	return name, labels, f, true
}

// selfCPU is this process's user and system CPU seconds.
func selfCPU(t *testing.T) float64 {
	var ru syscall.Rusage
	must(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// selfRSS is this process's resident memory, from /proc/self/statm.
func selfRSS(t *testing.T) float64 {
	b, err := os.ReadFile("/proc/self/statm")
	must(t, err)
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseFloat(f[1], 64)
	return pages * float64(os.Getpagesize())
}

// loadAverage is the machine's 1-minute load average.
func loadAverage(t *testing.T) float64 {
	b, err := os.ReadFile("/proc/loadavg")
	must(t, err)
	v, _ := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	return v
}

// raiseInotifyInstances makes room for at least want inotify instances of
// this user (the harness asks two per supervisor and some for the rest, so
// that the small sizes of make test leave the host's default of 128 as it
// is), as a node that runs many root containers needs (every
// supervisor here is root and holds one; beyond the default 128 they fall
// back to looking every second, and the figures would be the fallback's),
// and puts the old limit back at the end. Without root it leaves the
// limit and says so.
func raiseInotifyInstances(t *testing.T, want int) {
	t.Helper()
	const path = "/proc/sys/fs/inotify/max_user_instances"
	raw, err := os.ReadFile(path)
	if err != nil {
		return
	}
	old, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || old >= want {
		return
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(want)), 0o644); err != nil {
		t.Logf("fs.inotify.max_user_instances stays %d (%v): supervisors beyond it poll every second", old, err)
		return
	}
	t.Cleanup(func() { _ = os.WriteFile(path, raw, 0o644) })
}
