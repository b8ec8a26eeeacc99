package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// jobWithLimits is a Job whose container restarts in place on every
// failure, with the supervisor's limits in the rules annotation.
const jobWithLimits = `apiVersion: batch/v1
kind: Job
metadata:
  name: train
spec:
  backoffLimit: 1
  template:
    metadata:
      annotations:
        restart-supervisor.dev/rules: |
          trainer:
            restartBudget: {maxRestarts: 3, window: 1h}
            handOverExitCodes: [93]
            preRestartCheck: {command: [/bin/gpu-check, --wait], timeoutSeconds: 60}
            progress: {file: /ckpt/iteration, maxStalledRestarts: 2}
    spec:
      restartPolicy: OnFailure
      containers:
      - name: trainer
        image: x
        command: ["/train"]
        restartPolicy: Never
        restartPolicyRules:
        - action: Restart
          exitCodes: {operator: NotIn, values: [0]}
`

// TestExplainShowsTheLimits: explain lists the budget, the progress and
// the pre-restart check under the table, and exit code 93 as handed over
// although the rule would restart it.
func TestExplainShowsTheLimits(t *testing.T) {
	f := writeFile(t, filepath.Join(t.TempDir(), "job.yaml"), jobWithLimits)
	code, out, errOut := runCmd(t, "", "explain", "-f", f)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"trainer: restart budget: at most 3 in-place restarts within any 1h0m0s; then the exit is handed to the kubelet (pod restartPolicy OnFailure)",
		"trainer: progress: after 2 in-place restarts without a change of /ckpt/iteration, the exit is handed to the kubelet",
		"trainer: pre-restart check: /bin/gpu-check --wait (timeout 1m0s) before each in-place restart; when it fails, the exit is handed to the kubelet",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("explain lacks %q:\n%s", want, out)
		}
	}
	var row93 string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, " 93 ") {
			row93 = l
		}
	}
	if !strings.Contains(row93, "handOverExitCodes (rule 0: Restart NotIn [0])") || !strings.Contains(row93, "exit; kubelet applies pod policy OnFailure") || !strings.Contains(row93, "the pod policy decides, not the rules") {
		t.Errorf("exit 93 row %q; explain:\n%s", row93, out)
	}
}

// TestInjectCarriesTheLimitsIntoTheConfig: the limits of the annotation
// reach the supervisor's RESTART_SUPERVISOR_CONFIG, and a bad one is a
// one-line error naming the container and the field.
func TestInjectCarriesTheLimitsIntoTheConfig(t *testing.T) {
	f := writeFile(t, filepath.Join(t.TempDir(), "job.yaml"), jobWithLimits)
	code, out, errOut := runCmd(t, "", "inject", "-f", f)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := `"restartBudget":{"maxRestarts":3,"window":"1h0m0s"},"handOverExitCodes":[93],"preRestartCheck":{"command":["/bin/gpu-check","--wait"],"timeoutSeconds":60},"progress":{"file":"/ckpt/iteration","maxStalledRestarts":2}`
	if !strings.Contains(out, want) {
		t.Errorf("the injected config lacks the limits %s:\n%s", want, out)
	}
	for bad, msg := range map[string]string{
		"restartBudget: {maxRestarts: 3, window: 1h}":                              `container "trainer": restartBudget.window: Invalid value: "soon": must be a Go duration such as "10m"`,
		"progress: {file: /ckpt/iteration, maxStalledRestarts: 2}":                 `container "trainer": progress.file: Invalid value: "rel": must be an absolute path`,
		"handOverExitCodes: [93]":                                                  `line 3: trainer.handOverExitCodes: must be a list`,
		"preRestartCheck: {command: [/bin/gpu-check, --wait], timeoutSeconds: 60}": `unknown field "cmd"`,
	} {
		var repl string
		switch {
		case strings.HasPrefix(bad, "restartBudget"):
			repl = "restartBudget: {maxRestarts: 3, window: soon}"
		case strings.HasPrefix(bad, "progress"):
			repl = "progress: {file: rel, maxStalledRestarts: 2}"
		case strings.HasPrefix(bad, "handOver"):
			repl = "handOverExitCodes: 93"
		default:
			repl = "preRestartCheck: {cmd: [x]}"
		}
		f := writeFile(t, filepath.Join(t.TempDir(), "job.yaml"), strings.Replace(jobWithLimits, bad, repl, 1))
		code, _, errOut := runCmd(t, "", "inject", "-f", f)
		if code == exitOK || !strings.Contains(errOut, msg) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("%s: exit %d, stderr %q, want one line with %q", repl, code, errOut, msg)
		}
	}
}

// TestExplainShowsTheContainersBackoff: a container's own back-off from
// the rules annotation is listed under the table, the fields it leaves
// unset at the kubelet's values; a container without one gets no line.
func TestExplainShowsTheContainersBackoff(t *testing.T) {
	manifest := strings.Replace(jobWithLimits, "            handOverExitCodes: [93]\n",
		"            handOverExitCodes: [93]\n            backoff: {max: 1m}\n", 1)
	if manifest == jobWithLimits {
		t.Fatal("the fixture changed: no handOverExitCodes line to add the back-off after")
	}
	for _, tc := range []struct {
		manifest, want string
	}{
		{manifest, "trainer: back-off in place: 10s doubling to 1m0s, forgotten after 10m0s of running (max from the container's entry of restart-supervisor.dev/rules, the rest the kubelet's)"},
		{jobWithLimits, ""},
	} {
		f := writeFile(t, filepath.Join(t.TempDir(), "job.yaml"), tc.manifest)
		code, out, errOut := runCmd(t, "", "explain", "-f", f)
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if tc.want == "" {
			if strings.Contains(out, "back-off in place") {
				t.Errorf("explain of a container without a back-off of its own shows one:\n%s", out)
			}
			continue
		}
		if !strings.Contains(out, tc.want) {
			t.Errorf("explain lacks %q:\n%s", tc.want, out)
		}
	}
}

// TestNarrowSelfNeedsAuto: --narrow-self acts on --native=auto's
// conclusions; with another mode serve refuses it in one line, exit 2.
func TestNarrowSelfNeedsAuto(t *testing.T) {
	cmd := exec.Command(injectorBinary(t), "serve", "--native=off", "--narrow-self=restart-injector", "--namespace=x")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	code, errOut := cmd.ProcessState.ExitCode(), stderr.String()
	if err == nil || code != exitUsage || strings.Count(strings.TrimSpace(errOut), "\n") != 0 ||
		!strings.Contains(errOut, "--narrow-self needs --native=auto") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}
