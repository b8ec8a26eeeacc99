package rules

import (
	"strings"
	"testing"
	"time"
)

func TestParseLimits(t *testing.T) {
	doc := `
restartPolicy: Always
restartBudget: {maxRestarts: 3, window: 10m}
handOverExitCodes: [93, 137]
preRestartCheck: {command: [/bin/check, --gpu], timeoutSeconds: 5}
progress: {file: /ckpt/iteration, maxStalledRestarts: 2}
`
	c, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if c.RestartBudget.Max() != 3 || c.RestartBudget.WindowDuration() != 10*time.Minute || !c.HandsOver(93) || !c.HandsOver(137) || c.HandsOver(42) ||
		c.PreRestartCheck.Timeout() != 5*time.Second || c.PreRestartCheck.Command[1] != "--gpu" ||
		c.Progress.File != "/ckpt/iteration" || c.Progress.MaxStalledRestarts != 2 {
		t.Fatalf("parsed %+v", c)
	}
	js, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	want := `"restartBudget":{"maxRestarts":3,"window":"10m0s"},"handOverExitCodes":[93,137],"preRestartCheck":{"command":["/bin/check","--gpu"],"timeoutSeconds":5},"progress":{"file":"/ckpt/iteration","maxStalledRestarts":2}`
	if !strings.Contains(string(js), want) {
		t.Fatalf("JSON %s lacks %s", js, want)
	}
	back, err := Parse(js)
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	if js2, _ := back.Marshal(); string(js2) != string(js) {
		t.Fatalf("round trip changed the document:\n%s\n%s", js, js2)
	}
	// None by default: upstream's behaviour.
	c, _ = Parse([]byte(`restartPolicy: Always`))
	if c.RestartBudget != nil || c.HandOverExitCodes != nil || c.PreRestartCheck != nil || c.Progress != nil || c.RestartBudget.WindowDuration() != 0 ||
		c.PreRestartCheck.Timeout() != DefaultPreRestartTimeout {
		t.Fatalf("defaults: %+v", c.Limits)
	}
}

func TestLimitsErrors(t *testing.T) {
	long := "/" + strings.Repeat("a", MaxProgressPath)
	for doc, want := range map[string]string{
		`restartBudget: {window: 10m}`:                            `restartBudget.maxRestarts: Required value: the number of in-place restarts allowed`,
		`restartBudget: {maxRestarts: -1}`:                        `restartBudget.maxRestarts: Invalid value: -1: must be greater than or equal to 0`,
		`restartBudget: {maxRestarts: 101, window: 1h}`:           `restartBudget.maxRestarts: Invalid value: 101: must be at most 100 with a window`,
		`restartBudget: {maxRestarts: 1, window: 0s}`:             `restartBudget.window: Invalid value: "0s": must be greater than 0`,
		`restartBudget: {maxRestarts: 1, window: -1m}`:            `restartBudget.window: Invalid value: "-1m0s": must be greater than 0`,
		`restartBudget: {maxRestarts: 1, window: soon}`:           `config: restartBudget.window: Invalid value: "soon" (line 1): must be a Go duration such as "10s"`,
		`restartBudget: {maxRestarts: x}`:                         `config: restartBudget.maxRestarts: Invalid value: "x" (line 1): must be a 32-bit integer`,
		`restartBudget: {max: 1}`:                                 `config: restartBudget.max: unknown field (line 1); known fields: maxRestarts, window`,
		`restartBudget: 3`:                                        `config: restartBudget: Invalid value: "3" (line 1): must be a mapping`,
		`handOverExitCodes: [a]`:                                  `config: handOverExitCodes[0]: Invalid value: "a" (line 1): must be a 32-bit integer`,
		`handOverExitCodes: 93`:                                   `config: handOverExitCodes: Invalid value: "93" (line 1): must be a list of exit codes`,
		`preRestartCheck: {}`:                                     `preRestartCheck.command: Required value: the command to run`,
		`preRestartCheck: {command: [""]}`:                        `preRestartCheck.command: Required value: the command to run`,
		`preRestartCheck: {command: [x], timeoutSeconds: 3601}`:   `preRestartCheck.timeoutSeconds: Invalid value: 3601: must be between 1 and 3600 (0: 30s)`,
		`preRestartCheck: {command: "x"}`:                         `config: preRestartCheck.command: Invalid value: "x" (line 1): must be a list of strings`,
		`progress: {maxStalledRestarts: 1}`:                       `progress.file: Required value: an absolute path`,
		`progress: {file: rel, maxStalledRestarts: 1}`:            `progress.file: Invalid value: "rel": must be an absolute path`,
		`progress: {file: "` + long + `", maxStalledRestarts: 1}`: `progress.file: Too long: may not be more than 4096 bytes`,
		`progress: {file: /p}`:                                    `progress.maxStalledRestarts: Invalid value: 0: must be greater than or equal to 1`,
	} {
		_, err := Parse([]byte(doc))
		if err == nil || err.Error() != want {
			t.Errorf("%.60s:\n got %v\nwant %s", doc, err, want)
		}
		if err != nil && strings.ContainsAny(err.Error(), "\n\r") {
			t.Errorf("%.60s: error is not one line", doc)
		}
	}
	many := "handOverExitCodes: [" + strings.Repeat("1,", MaxValuesPerRule) + "1]"
	if _, err := Parse([]byte(many)); err == nil || !strings.Contains(err.Error(), "handOverExitCodes: Too many: 256") {
		t.Errorf("256 hand-over codes: %v", err)
	}
}
