package podstate

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// Exit codes of StatusCommand.
const (
	StatusOK         = 0
	StatusIncomplete = 1 // state directory unreadable, empty, or a document broken
	StatusUsage      = 2
)

// FormatTable writes statuses as a table, ages measured against now.
func FormatTable(w io.Writer, statuses []Status, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTAINER\tSTATE\tRESTARTS\tPOD RESTARTS\tLAST EXIT\tRULE\tACTION\tSTARTED\tUPDATED")
	for _, s := range statuses {
		exit, rule, action := "-", "-", "-"
		if e := s.LastExit; e != nil {
			exit = fmt.Sprint(e.Code)
			if e.Signal != "" {
				exit += " (" + e.Signal + ")"
			}
			if e.Rule != nil {
				rule = fmt.Sprint(*e.Rule)
			}
			if e.Action != "" {
				action = string(e.Action)
			}
			if e.PodRestart > 0 {
				action = fmt.Sprintf("pod restart %d", e.PodRestart)
			}
		}
		state := string(s.State)
		if s.State == StateBackoff && !s.NextStartAt.IsZero() {
			state += " (" + age(s.NextStartAt, now) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", s.Container, state, s.Restarts, s.PodRestarts,
			exit, rule, action, ago(s.StartedAt, now), ago(s.UpdatedAt, now))
	}
	return tw.Flush()
}

func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return age(now, t) + " ago"
}

// age renders the distance from earlier to later the way kubectl rounds
// ages: to the second, and to the minute above an hour.
func age(later, earlier time.Time) string {
	d := later.Sub(earlier)
	if d < 0 {
		d = 0
	}
	if d >= time.Hour {
		return d.Round(time.Minute).String()
	}
	return d.Round(time.Second).String()
}

// FormatJSON writes statuses as {"containers": [...]}.
func FormatJSON(w io.Writer, statuses []Status) error {
	if statuses == nil {
		statuses = []Status{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Containers []Status `json:"containers"`
	}{statuses})
}

// StatusCommand implements `restart-supervisor status [--json] [--state-dir
// DIR]`: the status of every supervised container of the pod. The state
// directory defaults to $RESTART_SUPERVISOR_STATE_DIR, then DefaultDir.
func StatusCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	def := os.Getenv(contract.EnvStateDir)
	if def == "" {
		def = DefaultDir
	}
	dir := fs.String("state-dir", def, "the pod's shared state directory")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: restart-supervisor status [--json] [--state-dir DIR]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return StatusOK
		}
		return StatusUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "restart-supervisor status: unexpected argument %q\n", fs.Arg(0))
		return StatusUsage
	}
	statuses, err := ReadAll(*dir)
	code := StatusOK
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(stderr, "restart-supervisor status: %s\n", line)
		}
		code = StatusIncomplete
	}
	if *asJSON {
		if err := FormatJSON(stdout, statuses); err != nil {
			return StatusIncomplete
		}
		if len(statuses) == 0 && code == StatusOK {
			code = StatusIncomplete
		}
		return code
	}
	if len(statuses) == 0 {
		if code == StatusOK {
			fmt.Fprintf(stderr, "restart-supervisor status: no supervised container has written its status in %s\n", *dir)
		}
		return StatusIncomplete
	}
	if err := FormatTable(stdout, statuses, time.Now()); err != nil {
		return StatusIncomplete
	}
	return code
}
