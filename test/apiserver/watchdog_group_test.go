package apiserver_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/internal/testutil"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
)

// TestStalledGroupRestartsOnce: four ranks of one group, two on each of two
// nodes, each under the real supervisor with a watchdog on its heartbeat
// file and RestartGroup on the watchdog's 124, and a node agent per node
// against a real API server. The ranks stop beating at the same moment,
// as a hung collective makes them, and ignore SIGTERM, so each stall's
// stop waits out a long grace; once every rank's watchdog has fired (the
// test waits for the four log lines, whatever the load), the test kills
// the four runs: four requests for the same step. The group restarts once (generation 1), every rank
// runs twice, no second run before every first run ended, and no rank
// starts a round of its own.
func TestStalledGroupRestartsOnce(t *testing.T) {
	env, client, dir, bin := startGroupTest(t)
	nodes := []string{"node-a", "node-b"}
	podsDirs := map[string]string{}
	for _, n := range nodes {
		podsDirs[n] = filepath.Join(dir, n, "pods")
		must(t, os.MkdirAll(podsDirs[n], 0o750))
	}
	const group = "hang"
	for _, n := range nodes {
		startGroupAgent(t, env.Config, n, podsDirs[n])
	}
	hang := filepath.Join(dir, "hang")
	var logs []string
	var outs []*testutil.SyncBuffer
	for i := 0; i < 4; i++ {
		node := nodes[i%2]
		p := groupPod(t, client, "default", fmt.Sprintf("rank-%d", i), node, group, "")
		state := stateDir(t, podsDirs[node], p.UID)
		log := filepath.Join(dir, p.Name+".log")
		hb := filepath.Join(dir, p.Name+".hb")
		cfg := fmt.Sprintf(`{"restartPolicy":"Never","podRestartPolicy":"Never",`+
			`"restartPolicyRules":[{"action":"RestartGroup","exitCodes":{"operator":"In","values":[124]}}],`+
			`"watchdog":{"heartbeatFile":%q,"firstHeartbeatSeconds":60,"stallSeconds":1,"gracePeriodSeconds":120}}`, hb)
		// Each run logs its start and end; the first beats until the
		// hang, then ignores SIGTERM; the second beats for ever.
		script := fmt.Sprintf(`echo "start $(date +%%s%%N)" >> %[1]s
n=$(grep -c start %[1]s)
trap 'echo "end $(date +%%s%%N)" >> %[1]s; exit 0' TERM
while [ "$n" -ge 2 ] || [ ! -e %[2]s ]; do touch %[3]s; sleep 0.1; done
trap '' TERM; echo "end $(date +%%s%%N)" >> %[1]s
sleep 600 & wait; sleep 600`, log, hang, hb)
		out := &testutil.SyncBuffer{}
		startMemberWith(t, bin, state, script, cfg, out)
		logs, outs = append(logs, log), append(outs, out)
		name := p.Name
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("%s supervisor:\n%s", name, tail(out.String(), 30))
			}
		})
	}
	runsOf := func(i int) int {
		b, _ := os.ReadFile(logs[i])
		return strings.Count(string(b), "start ")
	}
	waitFor(t, "every rank's first run", 30*time.Second, func(context.Context) (bool, error) {
		for i := range logs {
			if runsOf(i) < 1 {
				return false, nil
			}
		}
		return true, nil
	})
	waitFor(t, "every rank's first heartbeat", time.Minute, func(context.Context) (bool, error) {
		for _, o := range outs {
			if !strings.Contains(o.String(), "first heartbeat") {
				return false, nil
			}
		}
		return true, nil
	})
	must(t, os.WriteFile(hang, nil, 0o644))
	// Every rank's stall before any of their exits: then the runs end.
	var pids []int
	waitFor(t, "every rank's stall", 2*time.Minute, func(context.Context) (bool, error) {
		pids = pids[:0]
		for _, o := range outs {
			m := stalledPID.FindStringSubmatch(o.String())
			if m == nil {
				return false, nil
			}
			pid, _ := strconv.Atoi(m[1])
			pids = append(pids, pid)
		}
		return true, nil
	})
	for _, pid := range pids {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	waitFor(t, "every rank's second run", time.Minute, func(context.Context) (bool, error) {
		for i := range logs {
			if runsOf(i) < 2 {
				return false, nil
			}
		}
		return true, nil
	})
	time.Sleep(3 * time.Second) // three stall timeouts: room for a second round
	stalls := 0
	for i := range logs {
		if n := runsOf(i); n != 2 {
			t.Errorf("rank-%d ran %d times, want 2", i, n)
		}
		stalls += strings.Count(outs[i].String(), "stopping the stalled workload")
	}
	if stalls != 4 {
		t.Errorf("%d ranks stopped for their own stall, want all 4 (each asks for the group's restart)", stalls)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	must(t, err)
	obj, err := dyn.Resource(agentapi.GroupResource).Namespace("default").Get(context.Background(),
		agentapi.GroupObjectName(contract.LabelGroup+"="+group), metav1.GetOptions{})
	must(t, err)
	if gen, _, _ := unstructuredInt(obj.Object, "spec", "generation"); gen != 1 {
		t.Errorf("group generation %d, want 1: one restart for one hang", gen)
	}
	var lastEnd, firstRestart time.Time
	for i := range logs {
		r := readRuns(t, logs[i])
		if len(r) < 2 {
			continue
		}
		if r[0].end.After(lastEnd) {
			lastEnd = r[0].end
		}
		if firstRestart.IsZero() || r[1].start.Before(firstRestart) {
			firstRestart = r[1].start
		}
	}
	if !firstRestart.After(lastEnd) {
		t.Errorf("a rank started again (%s) before every rank's first run had ended (%s)", firstRestart.Format(time.StampMicro), lastEnd.Format(time.StampMicro))
	}
}

// stalledPID finds the pid of the run a watchdog is stopping in a
// supervisor's log.
var stalledPID = regexp.MustCompile(`stopping the stalled workload.* pid=([0-9]+)`)
