package rules

import (
	"strings"
	"testing"
	"time"
)

func TestParseProbes(t *testing.T) {
	cfg, err := Parse([]byte(`{"restartPolicy":"Never","podRestartPolicy":"Never","probes":{
		"liveness":{"exec":{"command":["cat","/tmp/ok"]},"periodSeconds":2,"failureThreshold":3,"terminationGracePeriodSeconds":5},
		"startup":{"httpGet":{"port":8080,"path":"/healthz","scheme":"HTTPS","httpHeaders":[{"name":"X","value":"y"}]},"periodSeconds":1},
		"readiness":{"tcpSocket":{"port":80},"successThreshold":2}}}`))
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Probes.Liveness
	if l.Handler() != "exec" || l.Period() != 2*time.Second || l.Failures() != 3 || l.Timeout() != time.Second || *l.TerminationGracePeriodSeconds != 5 {
		t.Errorf("liveness = %+v", l)
	}
	s := cfg.Probes.Startup
	if s.HTTPGet.SchemeOrDefault() != "HTTPS" || s.HTTPGet.HTTPHeaders[0].Name != "X" || s.Failures() != 3 || s.Successes() != 1 {
		t.Errorf("startup = %+v", s)
	}
	if cfg.Probes.Readiness.Successes() != 2 {
		t.Errorf("readiness = %+v", cfg.Probes.Readiness)
	}
}

func TestParseProbesRejects(t *testing.T) {
	big := `{"probes":{"liveness":{"exec":{"command":[` + strings.Repeat(`"a",`, MaxProbeCommandArgs) + `"a"]}}}}`
	for _, tc := range []struct{ doc, want string }{
		{`{"probes":{"liveness":{}}}`, "probes.liveness: Required value: must specify a handler type"},
		{`{"probes":{"liveness":{"exec":{"command":["a"]},"tcpSocket":{"port":1}}}}`, "probes.liveness: Forbidden: may not specify more than 1 handler type"},
		{`{"probes":{"liveness":{"exec":{"command":[]}}}}`, "probes.liveness.exec.command: Required value"},
		{`{"probes":{"liveness":{"exec":{"comand":["a"]}}}}`, "probes.liveness.exec.comand: unknown field"},
		{`{"probes":{"startup":{"tcpSocket":{"port":70000}}}}`, "probes.startup.tcpSocket.port: Invalid value: 70000"},
		{`{"probes":{"startup":{"tcpSocket":{"port":"http"}}}}`, "probes.startup.tcpSocket.port: Invalid value: \"http\""},
		{`{"probes":{"liveness":{"exec":{"command":["a"]},"successThreshold":2}}}`, "probes.liveness.successThreshold: Invalid value: 2: must be 1"},
		{`{"probes":{"liveness":{"exec":{"command":["a"]},"periodSeconds":-1}}}`, "probes.liveness.periodSeconds: Invalid value: -1"},
		{`{"probes":{"liveness":{"httpGet":{"port":1,"scheme":"FTP"}}}}`, "probes.liveness.httpGet.scheme: Unsupported value"},
		{`{"probes":{"liveness":{"exec":{"command":["a"]},"terminationGracePeriodSeconds":0}}}`, "probes.liveness.terminationGracePeriodSeconds: Invalid value: 0"},
		{`{"initContainer":true,"probes":{"liveness":{"exec":{"command":["a"]}}}}`, "probes: Forbidden"},
		{big, "probes.liveness.exec.command: Too many: 257"},
	} {
		_, err := Parse([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%.80s: err = %v, want %q", tc.doc, err, tc.want)
		}
	}
}

func TestRestartAfterProbeFailure(t *testing.T) {
	for _, tc := range []struct {
		container *RestartPolicy
		pod       RestartPolicy
		want      bool
	}{
		{nil, "", true}, {nil, Never, false}, {nil, OnFailure, true},
		{PolicyPtr(Always), Never, true}, {PolicyPtr(OnFailure), Never, true}, {PolicyPtr(Never), Always, false},
	} {
		c := Config{Container: Container{RestartPolicy: tc.container}, PodRestartPolicy: tc.pod}
		if got := c.RestartAfterProbeFailure(); got != tc.want {
			t.Errorf("container %v pod %q: %v, want %v", tc.container, tc.pod, got, tc.want)
		}
	}
}
