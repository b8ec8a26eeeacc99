package main_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/internal/upgradefixture"
)

// TestStatusReadsEveryReleasesState: `restart-supervisor status` of this
// release prints the state volume a pod of every earlier release left
// (testdata/upgrade), every container with its state and counts.
func TestStatusReadsEveryReleasesState(t *testing.T) {
	for _, release := range upgradefixture.Releases(t) {
		t.Run(release, func(t *testing.T) {
			state := upgradefixture.CopyState(t, release)
			out, err := exec.Command(bin, "status", "--json", "--state-dir", state).Output()
			if err != nil {
				t.Fatalf("status: %v\n%s", err, out)
			}
			var doc struct {
				Containers []map[string]any `json:"containers"`
			}
			if err := json.Unmarshal(out, &doc); err != nil {
				t.Fatalf("status --json: %v\n%s", err, out)
			}
			got := map[string]string{}
			for _, d := range doc.Containers {
				got[d["container"].(string)] = d["state"].(string)
			}
			want := map[string]string{"trainer": "exited", "worker": "running", "helper": "backoff"}
			for c, st := range want {
				if got[c] != st {
					t.Errorf("status says %s is %q, want %q (all: %v)", c, got[c], st, got)
				}
			}
			table, err := exec.Command(bin, "status", "--state-dir", state).Output()
			if err != nil || !strings.Contains(string(table), "trainer") || !strings.Contains(string(table), "RestartAllContainers") {
				t.Errorf("status table: %v\n%s", err, table)
			}
		})
	}
}

// fixtureContainer is what the supervisor reads of an injected container.
type fixtureContainer struct {
	Name    string   `yaml:"name"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
}

type fixturePod struct {
	Metadata struct {
		Name        string            `yaml:"name"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Spec struct {
		InitContainers []fixtureContainer `yaml:"initContainers"`
		Containers     []fixtureContainer `yaml:"containers"`
	} `yaml:"spec"`
}

var annotationRef = regexp.MustCompile(`^metadata\.annotations\['([^']+)'\]$`)

// TestReadsEveryReleasesEnvironment: every container an earlier release's
// injector wrapped (testdata/upgrade/<release>/injected) keeps its command
// line and environment when only the binary in the volume is replaced (a
// node where the new image is cached, a pod whose init container runs the
// new supervisor): this release's supervisor must take them as they are,
// start the workload and answer the stop signal. The downward-API values
// are filled as the kubelet fills them, from the pod's annotations.
func TestReadsEveryReleasesEnvironment(t *testing.T) {
	for _, release := range upgradefixture.Releases(t) {
		files, err := filepath.Glob(upgradefixture.Path(t, release, "injected", "*"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no injected pods: %v", release, err)
		}
		wrapped := 0
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var pod fixturePod
			if err := yaml.Unmarshal(b, &pod); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
				if len(c.Command) == 0 || c.Command[0] != contract.BinDir+"/restart-supervisor" {
					continue
				}
				wrapped++
				t.Run(release+"/"+filepath.Base(f)+"/"+c.Name, func(t *testing.T) {
					runFixtureContainer(t, pod, c)
				})
			}
		}
		if wrapped < 2 {
			t.Errorf("%s: %d wrapped containers in the fixture, want the fixture's pods to have some", release, wrapped)
		}
	}
}

// runFixtureContainer starts c as the kubelet would, with its workload
// replaced by one that records its start and waits, and stops it.
func runFixtureContainer(t *testing.T, pod fixturePod, c fixtureContainer) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o777); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			m := annotationRef.FindStringSubmatch(e.ValueFrom.FieldRef.FieldPath)
			if m == nil {
				t.Fatalf("env %s: field %s is not one the test fills", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			v = pod.Metadata.Annotations[m[1]]
		}
		if e.Name == contract.EnvStateDir {
			v = state
		}
		env = append(env, e.Name+"="+v)
	}
	argv := append(append([]string{}, c.Command...), c.Args...)
	sep := -1
	for i, a := range argv {
		if a == "--" {
			sep = i
			break
		}
	}
	if sep < 0 {
		t.Fatalf("no -- in %q", argv)
	}
	ran := filepath.Join(dir, "ran")
	argv = append([]string{bin}, argv[1:sep+1]...)
	argv = append(argv, "sh", "-c", "touch "+ran+"; sleep 30 & wait")
	// A member of a pod restart keeps the pod's other members in view:
	// the test's pod has only this one running, as in the first seconds
	// of a pod whose other containers have not started yet.
	s := start(t, env, argv...)
	// A re-run sidecar runs nothing at the pod's first start (the kubelet
	// runs the init container): it says so in its status document.
	rerun := strings.HasSuffix(c.Name, "-rerun")
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := os.Stat(ran); err == nil && !rerun {
			break
		}
		if b, err := os.ReadFile(filepath.Join(state, "status", c.Name+".json")); err == nil && rerun &&
			strings.Contains(string(b), `"state":"initialized"`) {
			break
		}
		select {
		case <-s.done:
			t.Fatalf("the supervisor exited %d before starting the workload:\n%s", s.status, s.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the workload did not start in 15 s:\n%s", s.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d := readStatusDoc(t, state, c.Name); d["container"] != c.Name {
		t.Errorf("status document %v, want container %s", d, c.Name)
	}
	s.signal(syscall.SIGTERM)
	if st := s.wait(15 * time.Second); st != 0 && st != 143 {
		t.Errorf("stopped: exit %d, want 0 or 143\n%s", st, s.stderr.String())
	}
}
