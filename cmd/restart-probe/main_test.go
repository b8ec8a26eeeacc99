package main

import (
	"bytes"
	"net"
	"strings"
	"testing"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// TestBadInputIsOneLine: every usage or document error is one line that
// names the problem, with exit status 2, and nothing is checked.
func TestBadInputIsOneLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage: restart-probe"},
		{[]string{"probe"}, "usage: restart-probe"},
		{[]string{"check"}, "usage: restart-probe"},
		{[]string{"check", "{"}, "probe: invalid JSON"},
		{[]string{"check", `{"tcpSocket":{"port":0}}`}, "probe.tcpSocket.port: Invalid value: 0"},
		{[]string{"check", `{"exec":{"command":["true"]},"tcpSocket":{"port":1}}`}, "probe: Forbidden: may not specify more than 1 handler type"},
		{[]string{"check", strings.Repeat(" ", 70<<10) + "{}"}, "larger than"},
	} {
		var stderr bytes.Buffer
		if code := run(tc.args, &stderr); code != exitUsage {
			t.Errorf("%.40q: exit %d, want %d", tc.args, code, exitUsage)
		}
		if out := stderr.String(); !strings.Contains(out, tc.want) || strings.Count(out, "\n") != 1 {
			t.Errorf("%.40q: stderr %q, want one line with %q", tc.args, out, tc.want)
		}
	}
}

func TestCheckExitStatus(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	doc := `{"tcpSocket":{"port":` + port + `}}`
	var stderr bytes.Buffer
	if code := run([]string{"check", "--name", "liveness", doc}, &stderr); code != 0 || stderr.Len() != 0 {
		t.Fatalf("open port: exit %d %q", code, stderr.String())
	}
	l.Close()
	if code := run([]string{"check", "--name", "liveness", doc}, &stderr); code != contract.ProbeExitFailed ||
		!strings.HasPrefix(stderr.String(), "restart-probe: liveness probe failed: tcpSocket 127.0.0.1:"+port) {
		t.Fatalf("closed port: exit %d %q", code, stderr.String())
	}
}
