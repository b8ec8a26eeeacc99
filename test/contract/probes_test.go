package contract_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/injector"
)

// TestInjectedProbesRunInTheSupervisor injects the golden probes.yaml with
// its probes pointed at servers this test starts on 127.0.0.1, installs
// both binaries as the init container does (restart-probe sits next to
// the supervisor in the image), and runs the wrapped container as the
// injector wrote it. The HTTPS liveness check (a named port) fails from
// its fourth answer on, which stops run 1; the container's OnFailure
// restarts it although the pod says Never; run 2 exits 0. The readiness
// probe the kubelet would run is `restart-probe ready` from the binary
// volume, and answers from the state volume.
func TestInjectedProbesRunInTheSupervisor(t *testing.T) {
	dir := t.TempDir()
	supervisor := build(t, dir, "github.com/restart-supervisor/restart-supervisor/cmd/restart-supervisor", "")
	build(t, dir, "github.com/restart-supervisor/restart-supervisor/cmd/restart-probe", "")

	var requests atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) > 3 || r.URL.Path != "/healthz" || r.Header.Get("X-Probe") != "liveness" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	portN, _ := strconv.Atoi(port)

	pod := goldenPod(t, "probes.yaml")
	c := findContainer(t, pod.Spec.Containers, "trainer")
	work := t.TempDir()
	c.Command = []string{"sh", "-c", `cd ` + work + `; [ -e ran ] && exit 0; : > ran; touch started; exec sleep 600`}
	c.RestartPolicy = ptrTo(corev1.ContainerRestartPolicyOnFailure)
	c.Ports[0].ContainerPort = int32(portN) // the liveness probe names this port
	c.LivenessProbe.PeriodSeconds = 1
	c.StartupProbe.Exec.Command = []string{"test", "-f", work + "/started"}
	c.ReadinessProbe.TCPSocket.Port = intstr.FromInt32(int32(portN))

	res, err := injector.New(injector.Options{SupervisorImage: "registry.test/restart-supervisor:contract"}).
		MutatePod(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	out := res.Pod
	wc := findContainer(t, out.Spec.Containers, "trainer")
	if wc.LivenessProbe != nil || wc.StartupProbe == nil || wc.StartupProbe.Exec == nil || wc.ReadinessProbe == nil || wc.ReadinessProbe.Exec == nil {
		t.Fatalf("probes of the wrapped container: liveness %v startup %v readiness %v", wc.LivenessProbe, wc.StartupProbe, wc.ReadinessProbe)
	}
	n := newNode(t, out, supervisor)
	argv, env, _ := n.process(findContainer(t, out.Spec.InitContainers, contract.InstallContainer))
	if code, log := run(t, argv, env); code != 0 {
		t.Fatalf("install container exited %d:\n%s", code, log)
	}
	argv, env, mounts := n.process(wc)

	// The kubelet's readiness exec probe, before the container runs: the
	// installed restart-probe finds no status document and says not ready.
	ready := append([]string(nil), wc.ReadinessProbe.Exec.Command...)
	ready[0] = hostPath(mounts, ready[0])
	if ready[0] == contract.ProbePath {
		t.Fatalf("readiness command %s is not in the binary volume", contract.ProbePath)
	}
	if code, log := run(t, ready, env); code != 1 || !strings.Contains(log, "not ready") {
		t.Fatalf("restart-probe ready before the start: exit %d %s", code, log)
	}
	started := append([]string(nil), wc.StartupProbe.Exec.Command...)
	started[0] = hostPath(mounts, started[0])
	if code, log := run(t, started, env); code != 1 || !strings.Contains(log, "not started") {
		t.Fatalf("restart-probe started before the start: exit %d %s", code, log)
	}

	code, log := run(t, argv, env)
	t.Logf("supervisor output:\n%s", log)
	if code != 0 {
		t.Fatalf("supervisor exited %d, want 0", code)
	}
	if !strings.Contains(log, "startup probe succeeded") || strings.Count(log, "liveness probe failed 3 times in a row") != 1 ||
		!strings.Contains(log, "HTTP status 503") || !strings.Contains(log, "gracePeriod=10s") {
		t.Fatalf("want a startup success, then one liveness kill after 3 failures with the probe's 10 s grace")
	}
	if _, err := os.Stat(filepath.Join(work, "ran")); err != nil {
		t.Fatal(err)
	}
}

func ptrTo[T any](v T) *T { return &v }
