package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/internal/testutil"
	"github.com/restart-supervisor/restart-supervisor/test/e2e/cluster"
)

// agentMemoryLimit is the node agent's memory limit in the chart and in
// deploy/components/node-agent, which also give it as GOMEMLIMIT.
const agentMemoryLimit = 128 << 20

// TestNodeAgentHostilePodsOnKubelet: 64 pods on a real kubelet, each writing
// into its state volume 15 status documents of 63 KiB (64 pods × 15 × 63 KiB
// = 59 MiB of documents, past the agent's per-pod and per-node budgets)
// beside one small valid document. Before the agent read pod by pod, 8 pods
// of 128 such documents took the 128Mi agent to 143–150 MiB. The built
// binary runs as the DaemonSet runs it (GOMEMLIMIT at its limit) over the
// kubelet's own pods directory for 20 scans; its peak RSS (VmHWM) must stay
// under the limit, and the valid documents must be read (their metrics
// show), so that the scans did happen.
func TestNodeAgentHostilePodsOnKubelet(t *testing.T) {
	repo, binDir := prepareNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	c, err := cluster.Up(ctx, cluster.Options{BinDir: binDir, Repo: repo, Log: testWriter{t}})
	if err != nil {
		t.Fatalf("cluster up: %v", err)
	}
	tearDownAtEnd(t, c)

	const pods, docs = 64, 15
	script := fmt.Sprintf(`d=/state/status; mkdir -p $d
printf '{"container":"hog","state":"running","restarts":1,"restartsTotal":1}' > $d/hog.json
i=1; while [ $i -le %d ]; do
  { printf '{"container":"x%%d","state":"running","restarts":1,"pad":"' $i; head -c 64000 /dev/zero | tr '\0' A; printf '"}'; } > $d/x$i.json
  i=$((i+1))
done
exec sleep 3600`, docs)
	for i := range pods {
		spec := podSpec(corev1.RestartPolicyNever, 1, shell("hog", script, nil))
		spec.Volumes = []corev1.Volume{{Name: contract.StateVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: contract.StateVolume, MountPath: "/state"}}
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("hog-%02d", i)}, Spec: spec}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Every pod's documents written: the last is on disk once the
	// container runs sleep, which the kubelet cannot tell; read the files.
	podsDir := filepath.Join(c.KubeletRoot(), "pods")
	for deadline := time.Now().Add(8 * time.Minute); ; time.Sleep(2 * time.Second) {
		l, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		done := 0
		for _, p := range l.Items {
			last := filepath.Join(podsDir, string(p.UID), "volumes", "kubernetes.io~empty-dir", contract.StateVolume, "status", fmt.Sprintf("x%d.json", docs))
			if st, err := os.Stat(last); err == nil && st.Size() > 64000 {
				done++
			}
		}
		if done == pods {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d pods wrote their documents", done, pods)
		}
	}

	bin := filepath.Join(t.TempDir(), "restart-injector")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/restart-injector")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var logs testutil.SyncBuffer
	agent := exec.CommandContext(ctx, bin, "node-agent", "--kubeconfig", c.Kubeconfig, "--kubelet-pods-dir", podsDir,
		"--interval=500ms", "--metrics-listen", addr, "--log-format=text")
	agent.Env = append(os.Environ(), "NODE_NAME="+cluster.NodeName, fmt.Sprintf("GOMEMLIMIT=%d", agentMemoryLimit))
	agent.Stdout, agent.Stderr = &logs, &logs
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = agent.Process.Kill()
		_ = agent.Wait()
	}()

	// 20 s of scans (40 at the interval on an idle node), then the peak.
	read := 0
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		resp.Body.Close()
		read = max(read, strings.Count(string(b), `restart_supervisor_container_restarts_total{container="hog"`))
	}
	hwm := testutil.ProcStatusKiB(t, agent.Process.Pid, "VmHWM") << 10
	rss := testutil.ProcStatusKiB(t, agent.Process.Pid, "VmRSS") << 10
	lines := strings.Count(logs.String(), "\n")
	t.Logf("node agent over %d pods × %d documents of 63 KiB: peak RSS %.1f MiB, RSS %.1f MiB after 20 s of scans, the small document of %d pods read, %d log lines",
		pods, docs, float64(hwm)/(1<<20), float64(rss)/(1<<20), read, lines)
	if read == 0 {
		t.Fatalf("no pod's valid document was read: the scans did not happen\n%s", logs.String())
	}
	if hwm >= agentMemoryLimit {
		t.Errorf("the node agent's peak RSS %d MiB reached its limit of %d MiB", hwm>>20, agentMemoryLimit>>20)
	}
}
