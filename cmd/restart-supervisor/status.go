package main

// The status subcommand: the status documents of every supervised container
// of the pod, read from the shared state directory, as a table or JSON.

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/rules"
	"github.com/restart-supervisor/restart-supervisor/statevol"
)

// Exit codes of the status subcommand.
const (
	statusOK         = 0
	statusIncomplete = 1 // state directory unreadable, empty, or a document broken
	statusUsage      = 2
)

// printable makes text from the state volume safe for a terminal. Every
// container of the pod can write there, and a container name, a signal
// name or a file name holding escape sequences would otherwise move the
// cursor, rewrite the screen or retitle the window of whoever runs status.
// Control and format characters (C0, DEL, C1, bidirectional overrides) and
// invalid UTF-8 are shown escaped instead.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsGraphic(r) || unicode.Is(unicode.Cf, r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case !unicode.IsGraphic(r) || unicode.Is(unicode.Cf, r):
			if r < 0x100 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
		i += size
	}
	return b.String()
}

// printableStatus applies printable to every string of a status document
// for the table.
func printableStatus(s statevol.Status) statevol.Status {
	s.Container = printable(s.Container)
	s.State = contract.Phase(printable(string(s.State)))
	s.SupervisorVersion = printable(s.SupervisorVersion)
	for _, e := range []**statevol.Exit{&s.LastExit, &s.LastRestart} {
		if *e != nil {
			c := **e
			c.Signal = printable(c.Signal)
			c.Action = rules.Action(printable(string(c.Action)))
			*e = &c
		}
	}
	return s
}

// formatTable writes statuses as a table, ages measured against now.
func formatTable(w io.Writer, statuses []statevol.Status, now time.Time) error {
	rows := [][]string{{"CONTAINER", "STATE", "RESTARTS", "POD RESTARTS", "LAST EXIT", "RULE", "ACTION", "STARTED", "UPDATED"}}
	for _, s := range statuses {
		s = printableStatus(s)
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
		if s.State == contract.PhaseBackingOff && !s.NextStartAt.IsZero() {
			state += " (" + age(s.NextStartAt, now) + ")"
		}
		rows = append(rows, []string{s.Container, state, fmt.Sprint(s.Restarts), fmt.Sprint(s.PodRestarts),
			exit, rule, action, ago(s.StartedAt, now), ago(s.UpdatedAt, now)})
	}
	return writeTable(w, rows)
}

// writeTable lays rows out as text/tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
// does lines of tab-separated cells of equal count: every cell but the
// last padded with spaces to its column's widest cell, counted in runes,
// plus two.
func writeTable(w io.Writer, rows [][]string) error {
	var widths []int
	for _, r := range rows {
		for i := 0; i < len(r)-1; i++ {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(r[i]))
		}
	}
	var b []byte
	for _, r := range rows {
		for i, c := range r {
			b = append(b, c...)
			if i < len(r)-1 {
				for n := utf8.RuneCountInString(c); n < widths[i]+2; n++ {
					b = append(b, ' ')
				}
			}
		}
		b = append(b, '\n')
	}
	_, err := w.Write(b)
	return err
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

// formatJSON writes statuses as {"containers": [...]}.
func formatJSON(w io.Writer, statuses []statevol.Status) error {
	if statuses == nil {
		statuses = []statevol.Status{}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(struct {
		Containers []statevol.Status `json:"containers"`
	}{statuses}); err != nil {
		return err
	}
	// encoding/json escapes C0 and replaces invalid UTF-8, but writes DEL,
	// C1 and bidirectional overrides raw; such runes only occur inside
	// strings, where \u escapes keep the data and the terminal safe.
	var out strings.Builder
	for _, r := range b.String() {
		if r == 0x7f || (r >= 0x80 && r < 0xa0) || unicode.Is(unicode.Cf, r) {
			fmt.Fprintf(&out, `\u%04x`, r)
		} else {
			out.WriteRune(r)
		}
	}
	_, err := io.WriteString(w, out.String())
	return err
}

// statusCmd implements `restart-supervisor status [--json] [--state-dir
// DIR]`: the status of every supervised container of the pod. The state
// directory defaults to $RESTART_SUPERVISOR_STATE_DIR, then DefaultDir.
func statusCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	def := os.Getenv(contract.EnvStateDir)
	if def == "" {
		def = contract.StateDir
	}
	dir := fs.String("state-dir", def, "the pod's shared state directory")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: restart-supervisor status [--json] [--state-dir DIR]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return statusOK
		}
		return statusUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "restart-supervisor status: unexpected argument %q\n", fs.Arg(0))
		return statusUsage
	}
	statuses, err := statevol.ReadAll(*dir)
	code := statusOK
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(stderr, "restart-supervisor status: %s\n", printable(line))
		}
		code = statusIncomplete
	}
	if *asJSON {
		if err := formatJSON(stdout, statuses); err != nil {
			return statusIncomplete
		}
		if len(statuses) == 0 && code == statusOK {
			code = statusIncomplete
		}
		return code
	}
	if len(statuses) == 0 {
		if code == statusOK {
			fmt.Fprintf(stderr, "restart-supervisor status: no supervised container has written its status in %s\n", *dir)
		}
		return statusIncomplete
	}
	if err := formatTable(stdout, statuses, time.Now()); err != nil {
		return statusIncomplete
	}
	return code
}
