// Command measured makes README's "Measured" table and the latest-run
// section of docs/benchmarks.md from one benchmark run, the figures
// bench/run.sh records in docs/benchmarks-run.tsv, so that every figure
// stands beside its baseline from the same run and neither document can
// drift from the run it cites.
//
//	go run ./bench/measured          check: exit 1 if either document differs
//	go run ./bench/measured -write   rewrite both between their markers
//
// Exit codes: 0 done (or up to date), 1 a document differs from the run,
// 2 a missing or malformed figure, marker or file (named on stderr).
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The generated text sits between these markers; the rest of each file is
// written by hand.
const (
	readmeBegin = "<!-- measured:begin (go run ./bench/measured -write) -->"
	readmeEnd   = "<!-- measured:end -->"
	docsBegin   = "<!-- latest-run:begin (go run ./bench/measured -write) -->"
	docsEnd     = "<!-- latest-run:end -->"
)

func main() {
	write := flag.Bool("write", false, "rewrite the documents instead of checking them")
	root := flag.String("root", ".", "the repository's top directory")
	flag.Parse()
	stale, err := run(*root, *write)
	if err != nil {
		fmt.Fprintln(os.Stderr, "measured:", err)
		os.Exit(2)
	}
	if len(stale) > 0 {
		fmt.Fprintf(os.Stderr, "measured: %s differ from docs/benchmarks-run.tsv; run go run ./bench/measured -write\n", strings.Join(stale, " and "))
		os.Exit(1)
	}
}

// run renders both sections from the run's figures and rewrites (write) or
// compares them; it returns the documents that differ.
func run(root string, write bool) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(root, "docs/benchmarks-run.tsv"))
	if err != nil {
		return nil, err
	}
	r, err := parse(data)
	if err != nil {
		return nil, err
	}
	readme, err := r.readmeTable()
	if err != nil {
		return nil, err
	}
	latest, err := r.latestRun()
	if err != nil {
		return nil, err
	}
	var stale []string
	for _, d := range []struct{ path, begin, end, body string }{
		{"README.md", readmeBegin, readmeEnd, readme},
		{"docs/benchmarks.md", docsBegin, docsEnd, latest},
	} {
		path := filepath.Join(root, d.path)
		old, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		updated, err := replaceBetween(old, d.begin, d.end, d.body)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.path, err)
		}
		if bytes.Equal(old, updated) {
			continue
		}
		if !write {
			stale = append(stale, d.path)
			continue
		}
		if err := os.WriteFile(path, updated, 0o644); err != nil {
			return nil, err
		}
	}
	return stale, nil
}

func replaceBetween(doc []byte, begin, end, body string) ([]byte, error) {
	i := bytes.Index(doc, []byte(begin))
	j := bytes.Index(doc, []byte(end))
	if i < 0 || j < i {
		return nil, fmt.Errorf("no %q ... %q markers", begin, end)
	}
	var out bytes.Buffer
	out.Write(doc[:i+len(begin)])
	out.WriteString("\n")
	out.WriteString(body)
	out.Write(doc[j:])
	return out.Bytes(), nil
}

// results are one run's figures: key, then value, as recorded.
type results map[string]string

func parse(data []byte) (results, error) {
	r := results{}
	for n, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		k, v, ok := strings.Cut(line, "\t")
		if !ok || k == "" || strings.ContainsAny(v, "\t") {
			return nil, fmt.Errorf("docs/benchmarks-run.tsv line %d: want KEY<TAB>VALUE, got %q", n+1, line)
		}
		r[k] = v // a key recorded twice keeps its last value
	}
	return r, nil
}

// lookup reads figures and gathers every missing one, so that one check
// names them all.
type lookup struct {
	r       results
	missing []string
}

func (l *lookup) num(key string) float64 {
	v, ok := l.r[key]
	if !ok {
		l.missing = append(l.missing, key)
		return 0
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		l.missing = append(l.missing, key+" (not a number: "+v+")")
	}
	return f
}

func (l *lookup) has(key string) bool { _, ok := l.r[key]; return ok }

func (l *lookup) str(key string) string {
	v, ok := l.r[key]
	if !ok {
		l.missing = append(l.missing, key)
	}
	return v
}

func (l *lookup) err() error {
	if len(l.missing) == 0 {
		return nil
	}
	return errors.New("docs/benchmarks-run.tsv lacks " + strings.Join(l.missing, ", "))
}

func ms(ns float64) string { return strconv.FormatFloat(ns/1e6, 'f', 3, 64) + " ms" }
func us(ns float64) string { return strconv.FormatFloat(ns/1e3, 'f', 0, 64) + " µs" }
func x(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64) + "×"
}
func kb(v float64) string     { return strconv.FormatFloat(v, 'f', 0, 64) + " kB" }
func mib(b float64) string    { return strconv.FormatFloat(b/(1<<20), 'f', 1, 64) + " MiB" }
func bytesN(b float64) string { return group(int64(b)) + " B" }
func rate(v float64) string   { return group(int64(v + 0.5)) }

// group writes 3354786 as 3,354,786.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "**missed**"
}

func (l *lookup) runLine() string {
	return fmt.Sprintf("%s, commit %s, %s CPUs, Linux %s, %s, load average %s at the start and %s at the end",
		l.str("meta.date"), l.str("meta.commit"), l.str("meta.cpus"), l.str("meta.kernel"), l.str("meta.go"),
		l.str("meta.load_start"), l.str("meta.load_end"))
}
