package apiserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/restart-supervisor/restart-supervisor/internal/testutil"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentstatus"
)

// buildInjector builds cmd/restart-injector into dir.
func buildInjector(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "restart-injector")
	build := exec.Command("go", "build", "-o", bin, "./cmd/restart-injector")
	build.Dir = repoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestStatusCommand runs the built `restart-injector status` and `kubectl
// restarts` with kubectl's habits against Events the in-process agent
// wrote from real status documents: POD before or after -n, -l, -A and
// --all-namespaces, -o wide|json|yaml|name, -w until interrupted, and the
// usage errors' exit status 2.
func TestStatusCommand(t *testing.T) {
	assets := kubeAssets(t)
	env, client := startAPIServer(t, assets, true)
	dir := t.TempDir()
	bin := buildInjector(t, dir)
	admin := kubeconfigFor(t, env, dir, "admin", envtest.User{Name: "status-admin", Groups: []string{"system:masters"}})
	ctx := context.Background()

	podsDir := filepath.Join(dir, "pods")
	web := createPod(t, client, "web", agentNode, "app")
	db := createPod(t, client, "db", agentNode, "main")
	for _, p := range []*corev1.Pod{web, db} {
		patch := []byte(`{"metadata":{"labels":{"app":"` + p.Name + `"}}}`)
		if _, err := client.CoreV1().Pods("default").Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	webDir, dbDir := stateDir(t, podsDir, web.UID), stateDir(t, podsDir, db.UID)
	writeStatus(t, webDir, "app", 0, 0, false)
	writeStatus(t, dbDir, "main", 0, 0, false)
	var writes atomic.Int64
	agent := startAgent(t, env.Config, podsDir, &writes)
	defer agent.stop(t)
	writeStatus(t, webDir, "app", 1, 0, false)
	writeStatus(t, dbDir, "main", 2, 0, false)
	waitEvents(t, client, web, agentapi.ReasonRestarted, 1)
	waitEvents(t, client, db, agentapi.ReasonRestarted, 2)
	registerAgentPod(t, client, agentNode)

	run := func(args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"status", "--kubeconfig=" + admin}, args...)...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		t.Logf("$ restart-injector status %s  (exit %d)\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
		return code, out.String(), errb.String()
	}
	lines := func(s string) []string { return strings.Split(strings.TrimRight(s, "\n"), "\n") }

	// POD before -n: the form that failed before (flag.Parse stopped at
	// the pod and took -n for a second pod).
	code, out, _ := run("web", "-n", "default")
	if l := lines(out); code != 0 || len(l) != 2 || !strings.HasPrefix(l[0], "POD   CONTAINER   IN-PLACE RESTARTS") || !strings.HasPrefix(l[1], "web   app         1 ") {
		t.Errorf("status web -n default: exit %d, want the header and web's row", code)
	}
	if code, out, _ = run("-n", "default", "pod/web"); code != 0 || len(lines(out)) != 2 {
		t.Errorf("status -n default pod/web: exit %d", code)
	}
	code, out, _ = run("-l", "app=db", "--namespace=default")
	if l := lines(out); code != 0 || len(l) != 2 || !strings.HasPrefix(l[1], "db ") {
		t.Errorf("status -l app=db: exit %d, want db's row alone", code)
	}
	if code, out, errs := run("-l", "app=none"); code != 0 || out != "" || !strings.Contains(errs, "No in-place restarts") {
		t.Errorf("status -l app=none: exit %d, want no rows", code)
	}
	for _, all := range []string{"-A", "--all-namespaces"} {
		code, out, _ = run(all)
		if l := lines(out); code != 0 || len(l) != 3 || !strings.HasPrefix(l[0], "NAMESPACE   POD ") || !strings.HasPrefix(l[1], "default     db ") {
			t.Errorf("status %s: exit %d, want NAMESPACE and two rows", all, code)
		}
	}
	code, out, _ = run("-A", "-o", "wide")
	if l := lines(out); code != 0 || len(l) != 3 || !strings.Contains(l[0], "NODE     POD UID") || !strings.Contains(l[2], agentNode+"   "+string(web.UID)) {
		t.Errorf("status -A -o wide: exit %d, want NODE and POD UID %s: %q", code, web.UID, l)
	}
	var list agentstatus.ContainerRestartsList
	code, out, _ = run("-n", "default", "-ojson")
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || list.Kind != "List" || len(list.Items) != 2 ||
		list.Items[1].Kind != agentstatus.ContainerRestartsKind || list.Items[1].Name != "web" || list.Items[1].Restarts != 1 || list.Items[1].UID != web.UID {
		t.Errorf("status -o json: exit %d, %v: %+v", code, err, list)
	}
	list = agentstatus.ContainerRestartsList{}
	code, out, _ = run("-n", "default", "--output=yaml", "db")
	if err := yaml.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list.Items) != 1 || list.Items[0].Container != "main" || list.Items[0].Restarts != 2 || list.Items[0].Node != agentNode {
		t.Errorf("status -o yaml db: exit %d, %v: %+v", code, err, list)
	}
	if code, out, _ = run("-o", "name", "-n", "default"); code != 0 || out != "pod/db\npod/web\n" {
		t.Errorf("status -o name: exit %d, %q", code, out)
	}
	if code, out, _ = run("-l", "app=none", "-o", "json"); code != 0 || !strings.Contains(out, `"items": []`) {
		t.Errorf("status -o json of nothing: exit %d, want an empty List", code)
	}

	for _, bad := range []struct {
		args []string
		msg  string
	}{
		{[]string{"-o", "xml"}, `-o "xml": want one of wide, json, yaml, name`},
		{[]string{"web", "db"}, "one POD at most, got 2: web db"},
		{[]string{"-A", "web"}, "a POD needs its namespace"},
		{[]string{"-A", "-n", "default"}, "-A (every namespace) and -n default exclude each other"},
		{[]string{"deploy/web"}, `"deploy/web": status lists pods only`},
		{[]string{"-l", "a b"}, `-l "a b"`},
		{[]string{"--bogus"}, "unknown flag: --bogus"},
	} {
		if code, _, errs := run(bad.args...); code != 2 || !strings.Contains(errs, bad.msg) {
			t.Errorf("status %s: exit %d, want 2 and %q", strings.Join(bad.args, " "), code, bad.msg)
		}
	}

	// kubectl's connection flags reach the API server: impersonated as a
	// user without rights, status is refused; as a group that has them,
	// it lists as before; a context the kubeconfig lacks is one line.
	if code, _, errs := run("-n", "default", "--as", "nobody"); code != 1 || !strings.Contains(errs, `is forbidden: User "nobody" cannot list resource`) {
		t.Errorf("status --as nobody: exit %d %q, want 1 and the API server's refusal of that user", code, errs)
	}
	if code, out, _ := run("-n", "default", "--as", "somebody", "--as-group", "system:masters"); code != 0 || len(lines(out)) != 3 {
		t.Errorf("status --as somebody --as-group system:masters: exit %d, want both rows", code)
	}
	if code, _, errs := run("--context", "elsewhere"); code != 1 || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "context was not found for specified context: elsewhere") {
		t.Errorf("status --context elsewhere: exit %d %q, want 1 and one line", code, errs)
	}

	// -w: the listing, then each change, until interrupted.
	for _, format := range []string{"", "json"} {
		cmd := exec.Command(bin, "status", "--kubeconfig="+admin, "-n", "default", "web", "-w", "-o", format)
		if format == "" {
			cmd = exec.Command(bin, "status", "--kubeconfig="+admin, "-n", "default", "web", "-w")
		}
		var errb testutil.SyncBuffer
		cmd.Stderr = &errb
		stdout, err := cmd.StdoutPipe()
		must(t, err)
		must(t, cmd.Start())
		got := make(chan string, 100)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				got <- sc.Text()
			}
			close(got)
		}()
		var seen []string
		next := func(what string, ok func(string) bool) {
			t.Helper()
			deadline := time.After(60 * time.Second)
			for {
				select {
				case l, open := <-got:
					if !open {
						t.Fatalf("status -w ended before %s: %s\n%s", what, strings.Join(seen, "\n"), errb.String())
					}
					seen = append(seen, l)
					if ok(l) {
						return
					}
				case <-deadline:
					_ = cmd.Process.Kill()
					t.Fatalf("status -w: no %s in 60 s:\n%s", what, strings.Join(seen, "\n"))
				}
			}
		}
		n := 2
		if format == "json" {
			n = 4
		}
		if format == "" {
			next("the listing", func(l string) bool { return strings.HasPrefix(l, "web   app         1 ") })
		} else {
			next("the listing", func(l string) bool { return strings.Contains(l, `"restarts": 2`) })
		}
		// The restart after the listing: the watch is open once the
		// listing is out, and the agent writes the Event after this.
		writeStatus(t, webDir, "app", n, 0, false)
		if format == "" {
			next("the change", func(l string) bool { return strings.HasPrefix(l, "web   app         2 ") })
		} else {
			next("the change", func(l string) bool { return strings.Contains(l, `"restarts": 4`) })
		}
		must(t, cmd.Process.Signal(syscall.SIGINT))
		for range got {
		}
		err = cmd.Wait()
		t.Logf("$ restart-injector status -n default web -w -o %q  (then SIGINT: %v)\n%s\n%s", format, err, strings.Join(seen, "\n"), errb.String())
		if err != nil {
			t.Errorf("status -w -o %q after SIGINT: %v, want exit 0", format, err)
		}
		if format == "" && strings.Count(strings.Join(seen, "\n"), "CONTAINER") != 1 {
			t.Errorf("status -w printed the header more than once")
		}
	}

	// As the kubectl plugin, flags after the pod.
	plugins := filepath.Join(dir, "plugins")
	must(t, os.MkdirAll(plugins, 0o755))
	must(t, os.Symlink(bin, filepath.Join(plugins, "kubectl-restarts")))
	plugin := exec.Command(filepath.Join(assets, "kubectl"), "restarts", "db", "-n", "default", "-owide")
	plugin.Env = append(os.Environ(), "PATH="+plugins+":"+os.Getenv("PATH"), "KUBECONFIG="+admin)
	pout, err := plugin.CombinedOutput()
	t.Logf("$ kubectl restarts db -n default -owide\n%s", pout)
	if l := lines(string(pout)); err != nil || len(l) != 2 || !strings.HasPrefix(l[1], "db    main        2 ") || !strings.Contains(l[0], "NODE") {
		t.Errorf("kubectl restarts db -n default -owide: %v", err)
	}

	// kubectl's own completion of the plugin, through a
	// kubectl_complete-restarts link: flags, -o's formats, and the
	// cluster's namespaces and pods.
	must(t, os.Symlink(bin, filepath.Join(plugins, "kubectl_complete-restarts")))
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"--all"}, "--all-namespaces\n:4\n"},
		{[]string{"-o", ""}, "wide\njson\nyaml\nname\n:4\n"},
		{[]string{"-n", "def"}, "default\n:4\n"},
		{[]string{"-n", "default", ""}, "db\nweb\n:4\n"},
		{[]string{"w"}, "web\n:4\n"},
	} {
		comp := exec.Command(filepath.Join(assets, "kubectl"), append([]string{"__complete", "restarts"}, c.words...)...)
		comp.Env = append(os.Environ(), "PATH="+plugins+":"+os.Getenv("PATH"), "KUBECONFIG="+admin)
		out, err := comp.Output()
		t.Logf("$ kubectl __complete restarts %s\n%s", strings.Join(c.words, " "), out)
		if err != nil || string(out) != c.want {
			t.Errorf("kubectl __complete restarts %q: %v %q, want %q", c.words, err, out, c.want)
		}
	}
}

// TestStatusWatchResumes: an API server that ends every watch after 1 to 2
// s (--min-request-timeout=1); status -w resumes from the last Event it
// saw and still prints the restart that comes after the server ended its
// first watch (the API server's own request count says when it has).
func TestStatusWatchResumes(t *testing.T) {
	env, client := startAPIServerWith(t, kubeAssets(t), true, map[string]string{"min-request-timeout": "1"})
	dir := t.TempDir()
	bin := buildInjector(t, dir)
	admin := kubeconfigFor(t, env, dir, "admin", envtest.User{Name: "status-admin", Groups: []string{"system:masters"}})
	podsDir := filepath.Join(dir, "pods")
	web := createPod(t, client, "web", agentNode, "app")
	webDir := stateDir(t, podsDir, web.UID)
	writeStatus(t, webDir, "app", 0, 0, false)
	var writes atomic.Int64
	agent := startAgent(t, env.Config, podsDir, &writes)
	defer agent.stop(t)
	writeStatus(t, webDir, "app", 1, 0, false)
	waitEvents(t, client, web, agentapi.ReasonRestarted, 1)
	registerAgentPod(t, client, agentNode)

	// Ended watches of events, as the API server counts them.
	endedWatches := func(ctx context.Context) (int, error) {
		b, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			return 0, err
		}
		n := 0
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "apiserver_request_total{") && strings.Contains(l, `verb="WATCH"`) && strings.Contains(l, `resource="events"`) {
				f := strings.Fields(l)
				var v float64
				if _, err := fmt.Sscan(f[len(f)-1], &v); err == nil {
					n += int(v)
				}
			}
		}
		return n, nil
	}
	before, err := endedWatches(context.Background())
	must(t, err)

	cmd := exec.Command(bin, "status", "--kubeconfig="+admin, "-n", "default", "-w")
	var errb testutil.SyncBuffer
	cmd.Stderr = &errb
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	defer cmd.Process.Kill()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	wait := func(prefix string) {
		t.Helper()
		deadline := time.After(60 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("status -w ended: %s", errb.String())
				}
				if strings.HasPrefix(l, prefix) {
					return
				}
			case <-deadline:
				t.Fatalf("no line %q in 60 s: %s", prefix, errb.String())
			}
		}
	}
	wait("web   app         1 ")
	waitFor(t, "the API server to end status's first watch", 60*time.Second, func(ctx context.Context) (bool, error) {
		n, err := endedWatches(ctx)
		return n > before, err
	})
	writeStatus(t, webDir, "app", 2, 0, false)
	wait("web   app         2 ")
	must(t, cmd.Process.Signal(syscall.SIGINT))
	for range lines {
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("status -w after SIGINT: %v\n%s", err, errb.String())
	}
}
