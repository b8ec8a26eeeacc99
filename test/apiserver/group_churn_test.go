package apiserver_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/internal/testutil"
	"github.com/restart-supervisor/restart-supervisor/nodeagent"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
)

// The API server goes away for the agents for 10 s just after a group's
// generation is made, before any node could report: their connections are
// cut, their writes refused and their watches broken. Once it is back the round completes as a round does: every
// member restarted once, none before all stopped, released and marked done
// by its coordinator, and well before GroupStopWait (the bound that
// releases a node's members without the others).
func TestGroupRoundSurvivesAPIServerOutage(t *testing.T) {
	env, client, dir, bin := startGroupTest(t)
	dyn, err := dynamic.NewForConfig(env.Config)
	must(t, err)
	nodes := []string{"node-a", "node-b"}
	podsDirs := map[string]string{}
	for _, n := range nodes {
		podsDirs[n] = filepath.Join(dir, n, "pods")
		must(t, os.MkdirAll(podsDirs[n], 0o750))
	}
	type member struct {
		pod      *corev1.Pod
		state    string
		log      string
		out      *testutil.SyncBuffer
		exitFile string
	}
	var members []*member
	for i := 0; i < 4; i++ {
		node := nodes[i%2]
		p := groupPod(t, client, "default", fmt.Sprintf("rank-%d", i), node, "outage", "")
		members = append(members, &member{pod: p, state: stateDir(t, podsDirs[node], p.UID), log: filepath.Join(dir, p.Name+".log"),
			out: &testutil.SyncBuffer{}, exitFile: filepath.Join(dir, "exit")})
	}
	// The agents reach the API server through a proxy on loopback that
	// the test takes down: their connections are cut and new ones
	// refused, as when the API server is gone.
	proxy := startProxy(t, env.Config.Host)
	agentCfg := rest.CopyConfig(env.Config)
	agentCfg.Host = "https://" + proxy.addr
	for _, n := range nodes {
		startGroupAgent(t, agentCfg, n, podsDirs[n])
	}
	for i, m := range members {
		script := fmt.Sprintf(`echo "start $(date +%%s%%N)" >> %[1]s
trap 'echo "end $(date +%%s%%N)" >> %[1]s; exit 0' TERM
if [ %[2]d = 0 ] && [ ! -e %[3]s.done ]; then
  while [ ! -e %[3]s ]; do sleep 0.05; done; touch %[3]s.done; echo "end $(date +%%s%%N)" >> %[1]s; exit 42
fi
while :; do sleep 0.1; done`, m.log, i, m.exitFile)
		startMember(t, bin, m.state, script, m.out)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("%s supervisor:\n%s", m.pod.Name, tail(m.out.String(), 20))
			}
		})
	}
	waitFor(t, "every rank's first run", time.Minute, func(context.Context) (bool, error) {
		for _, m := range members {
			if len(readRuns(t, m.log)) != 1 {
				return false, nil
			}
		}
		return true, nil
	})

	must(t, os.WriteFile(members[0].exitFile, nil, 0o644))
	name := agentapi.GroupObjectName(contract.LabelGroup + "=outage")
	waitFor(t, "generation 1", 30*time.Second, func(ctx context.Context) (bool, error) {
		o, err := dyn.Resource(agentapi.GroupResource).Namespace("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return agentapi.GroupFromObject(o).Generation == 1, nil
	})
	t.Logf("rank 0's exit → generation 1 seen %s", time.Since(readRuns(t, members[0].log)[0].end).Round(10*time.Millisecond))
	proxy.down()
	time.Sleep(10 * time.Second)
	proxy.up(t)

	waitFor(t, "every rank's second run", 2*nodeagent.GroupStopWait, func(context.Context) (bool, error) {
		for _, m := range members {
			if len(readRuns(t, m.log)) < 2 {
				return false, nil
			}
		}
		return true, nil
	})
	var memberRuns [][]rankRun
	for _, m := range members {
		runs := readRuns(t, m.log)
		if len(runs) != 2 {
			t.Errorf("%s ran %d times, want 2 (one group restart)", m.pod.Name, len(runs))
			continue
		}
		memberRuns = append(memberRuns, runs)
	}
	lastEnd, firstStart, lastStart := roundSpan(memberRuns)
	if !firstStart.After(lastEnd) {
		t.Errorf("a rank started again before every rank had stopped")
	}
	exit := readRuns(t, members[0].log)[0].end
	if took := lastStart.Sub(exit); took >= nodeagent.GroupStopWait {
		t.Errorf("exit → last start %s: the round was released by GroupStopWait (%s), not by its coordinator", took, nodeagent.GroupStopWait)
	}
	waitFor(t, "the round released and done by its coordinator", 30*time.Second, func(ctx context.Context) (bool, error) {
		o, err := dyn.Resource(agentapi.GroupResource).Namespace("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		st := agentapi.GroupFromObject(o)
		return st.Released == 1 && st.Done == 1, nil
	})
	t.Logf("exit → last start %s across a 10 s outage; last stop → first start %s", lastStart.Sub(exit).Round(10*time.Millisecond),
		firstStart.Sub(lastEnd).Round(10*time.Millisecond))
}

// A pod made during a round (a Job replacing a failed pod) whose container
// has not started yet (its state volume is there, no supervisor runs in
// it): it takes no part in that round, which would otherwise wait for it
// until GroupStopWait. The round, held open 2 s by a member slow to stop,
// completes well before that, and nothing is delivered to the new pod.
func TestGroupRoundIgnoresAPodMadeDuringIt(t *testing.T) {
	env, client, dir, bin := startGroupTest(t)
	nodes := []string{"node-a", "node-b"}
	podsDirs := map[string]string{}
	for _, n := range nodes {
		podsDirs[n] = filepath.Join(dir, n, "pods")
		must(t, os.MkdirAll(podsDirs[n], 0o750))
		startGroupAgent(t, env.Config, n, podsDirs[n])
	}
	exitFile := filepath.Join(dir, "exit")
	var logs []string
	for i, node := range nodes {
		p := groupPod(t, client, "default", fmt.Sprintf("rank-%d", i), node, "join", "")
		log := filepath.Join(dir, p.Name+".log")
		logs = append(logs, log)
		// Rank 0 exits 42 once; rank 1 takes its whole grace (2 s) to
		// stop, which holds the round open.
		script := fmt.Sprintf(`echo "start $(date +%%s%%N)" >> %[1]s
trap 'sleep 5; exit 0' TERM
if [ %[2]d = 0 ] && [ ! -e %[3]s.done ]; then
  while [ ! -e %[3]s ]; do sleep 0.05; done; touch %[3]s.done; echo "end $(date +%%s%%N)" >> %[1]s; exit 42
fi
while :; do sleep 0.1; done`, log, i, exitFile)
		out := &testutil.SyncBuffer{}
		startMember(t, bin, stateDir(t, podsDirs[node], p.UID), script, out)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("%s supervisor:\n%s", p.Name, tail(out.String(), 20))
			}
		})
	}
	waitFor(t, "both ranks' first run", time.Minute, func(context.Context) (bool, error) {
		return len(readRuns(t, logs[0])) == 1 && len(readRuns(t, logs[1])) == 1, nil
	})
	must(t, os.WriteFile(exitFile, nil, 0o644))
	dyn, err := dynamic.NewForConfig(env.Config)
	must(t, err)
	waitFor(t, "generation 1", 30*time.Second, func(ctx context.Context) (bool, error) {
		o, err := dyn.Resource(agentapi.GroupResource).Namespace("default").Get(ctx, agentapi.GroupObjectName(contract.LabelGroup+"=join"), metav1.GetOptions{})
		return err == nil && agentapi.GroupFromObject(o).Generation == 1, nil
	})
	// The generation's cause time and a pod's creation are whole
	// seconds, and a pod made in the cause's second takes part: the new
	// pod comes 1.1 s after the generation, while rank 1 is still
	// stopping.
	time.Sleep(1100 * time.Millisecond)
	late := groupPod(t, client, "default", "rank-new", "node-a", "join", "")
	lateState := stateDir(t, podsDirs["node-a"], late.UID)
	waitFor(t, "both ranks' second run", nodeagent.GroupStopWait, func(context.Context) (bool, error) {
		return len(readRuns(t, logs[0])) == 2 && len(readRuns(t, logs[1])) == 2, nil
	})
	exit := readRuns(t, logs[0])[0].end
	last := readRuns(t, logs[1])[1].start
	if r0 := readRuns(t, logs[0])[1].start; r0.After(last) {
		last = r0
	}
	if took := last.Sub(exit); took >= nodeagent.GroupStopWait {
		t.Errorf("exit → last start %s: the new pod held the round until GroupStopWait", took)
	}
	entries, _ := os.ReadDir(filepath.Join(lateState, contract.PodRestartsDir))
	if len(entries) != 0 {
		t.Errorf("the pod made during the round was delivered it: %s holds %s", contract.PodRestartsDir, entries)
	}
	t.Logf("a pod made 1.1 s into the round: exit → last start %s", last.Sub(exit).Round(10*time.Millisecond))
}

// tcpProxy forwards loopback connections to the API server until down
// cuts them all and refuses new ones; up listens again on the same port.
type tcpProxy struct {
	addr, target string
	mu           sync.Mutex
	ln           net.Listener
	conns        []net.Conn
}

func startProxy(t *testing.T, apiHost string) *tcpProxy {
	t.Helper()
	u, err := url.Parse(apiHost)
	must(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	p := &tcpProxy{addr: ln.Addr().String(), target: u.Host}
	p.serve(ln)
	t.Cleanup(p.down)
	return p
}

func (p *tcpProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); s.Close() }()
			go func() { _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
}

// down closes the listener and every connection through it.
func (p *tcpProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// up listens again on the proxy's address.
func (p *tcpProxy) up(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	must(t, err)
	p.serve(ln)
}
