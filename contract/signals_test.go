package contract

import "testing"

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]int{"SIGTERM": 15, "term": 15, "Sigquit": 3, "9": 9, "64": 64,
		"SIGRTMIN": 34, "SIGRTMIN+1": 35, "rtmin+15": 49, "SIGRTMAX-14": 50, "SIGRTMAX": 64, "SIGCLD": 17, "SIGIOT": 6, "SIGPOLL": 29} {
		if s, ok := ParseSignal(in); !ok || int(s) != want {
			t.Errorf("%s: %d %v, want %d", in, s, ok, want)
		}
	}
	for _, in := range []string{"", "0", "65", "SIGNOPE", "99999999999", "SIGRTMIN+31", "SIGRTMAX+1", "SIGRTMIN-1", "SIGRTMINX", "SIGRTMIN+"} {
		if _, ok := ParseSignal(in); ok {
			t.Errorf("%q accepted", in)
		}
	}
}

func TestExtraStopSignal(t *testing.T) {
	for in, want := range map[string]string{"SIGQUIT": "SIGQUIT", "QUIT": "QUIT", "3": "3", "SIGRTMIN+3": "SIGRTMIN+3",
		"": "", "SIGTERM": "", "15": "", "SIGINT": "", "SIGKILL": "", "KILL": "", "SIGSTOP": "", "SIGCHLD": "", "SIGCLD": "", "SIGFOO": ""} {
		if got, ok := ExtraStopSignal(in); got != want || ok != (want != "") {
			t.Errorf("%q: %q %v, want %q", in, got, ok, want)
		}
	}
}
