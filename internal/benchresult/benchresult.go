// Package benchresult records the figures of one benchmark run for the
// files that are made from it (docs/benchmarks-run.tsv, then README's
// "Measured" table and docs/benchmarks.md's latest-run section, by
// bench/measured). The programs of bench/ call Record beside what they
// print; with BENCH_RESULTS unset (a run by hand) it records nothing.
package benchresult

import (
	"fmt"
	"os"
	"strings"
)

// Record appends "key<TAB>value" to the file BENCH_RESULTS names. Keys are
// dotted names in the unit their last part says (_ns, _bytes, _kb, _per_s,
// or a plain count); bench/run.sh adds the run's date, commit and load.
func Record(key string, value float64) {
	path := os.Getenv("BENCH_RESULTS")
	if path == "" {
		return
	}
	if strings.ContainsAny(key, "\t\n ") {
		fmt.Fprintf(os.Stderr, "benchresult: key %q holds white space\n", key)
		os.Exit(2)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchresult:", err)
		os.Exit(1)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "%s\t%g\n", key, value); err != nil {
		fmt.Fprintln(os.Stderr, "benchresult:", err)
		os.Exit(1)
	}
}
