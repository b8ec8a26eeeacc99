package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestFlagConventions runs every command through the built binary with
// kubectl's flag habits: --help prints the command's usage and flags and
// exits 0; an unknown flag is one line naming it and how to list the
// flags, exit 2; a long flag written with one dash, as the commands took
// it before pflag, means the same as with two; the long forms of the
// shorthands work.
func TestFlagConventions(t *testing.T) {
	for _, cmd := range []string{"inject", "uninject", "explain", "compose", "docker-args", "serve", "node-agent", "check", "status", "version", "completion"} {
		code, _, errs := runBin(t, nil, cmd, "--help")
		if code != exitOK || !strings.Contains(errs, "usage: restart-injector "+cmd) || !strings.Contains(errs, "\nflags:\n") {
			t.Errorf("%s --help: exit %d, stderr %q: want 0 and the usage with its flags", cmd, code, errs)
		}
		code, out, errs := runBin(t, nil, cmd, "--bogus")
		want := "restart-injector " + cmd + ": unknown flag: --bogus (restart-injector " + cmd + " -h lists the flags)\n"
		if code != exitUsage || errs != want || out != "" {
			t.Errorf("%s --bogus: exit %d, stdout %q, stderr %q; want %d and only %q", cmd, code, out, errs, exitUsage, want)
		}
	}

	dir := t.TempDir()
	manifest := writeFile(t, filepath.Join(dir, "deploy.yaml"), strings.ReplaceAll(deployYAML, "IMAGE", "example.test/app:1"))
	want, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	// The same injection spelled three ways: Go flag's single dash,
	// pflag's long forms, and shorthands.
	var outputs []string
	for i, args := range [][]string{
		{"inject", "-no-lookup", "-f", manifest, "-q", "-o", filepath.Join(dir, "out0.yaml"), "-supervisor-image=example.test/sup:1"},
		{"inject", "--no-lookup", "--filename", manifest, "--quiet", "--output", filepath.Join(dir, "out1.yaml"), "--supervisor-image", "example.test/sup:1"},
		{"inject", "-f", manifest, "--no-lookup", "-q", "--supervisor-image=example.test/sup:1", "-o", filepath.Join(dir, "out2.yaml")},
	} {
		code, _, errs := runBin(t, nil, args...)
		if code != exitOK || errs != "" {
			t.Fatalf("%s: exit %d, stderr %q", strings.Join(args, " "), code, errs)
		}
		b, err := os.ReadFile(filepath.Join(dir, "out"+string(rune('0'+i))+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if string(b) == string(want) || !strings.Contains(string(b), "restart-supervisor") {
			t.Fatalf("%s wrote no injected manifest:\n%s", strings.Join(args, " "), b)
		}
		outputs = append(outputs, string(b))
	}
	if outputs[0] != outputs[1] || outputs[1] != outputs[2] {
		t.Errorf("the three spellings injected differently")
	}
	// A value that is not one of the flag's: one line, with the flag's
	// name, whichever way it was written.
	for _, arg := range []string{"-max-in-flight=many", "--max-in-flight=many"} {
		code, _, errs := runBin(t, nil, "serve", arg)
		if code != exitUsage || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "max-in-flight") {
			t.Errorf("serve %s: exit %d, stderr %q: want one line naming --max-in-flight", arg, code, errs)
		}
	}
	// A shorthand with its value attached is not a long flag.
	if code, out, errs := runBin(t, nil, "version", "-ojson"); code != exitOK || !strings.Contains(out, `"version"`) {
		t.Errorf("version -ojson: exit %d %q %q", code, out, errs)
	}
	// explain -o json and -o yaml: the tables' content as objects.
	for _, format := range []string{"json", "yaml"} {
		code, out, errs := runBin(t, nil, "explain", "--filename", manifest, "-o", format)
		var list explanationList
		if err := yaml.Unmarshal([]byte(out), &list); code != exitOK || err != nil || list.Kind != "ExplanationList" || len(list.Items) != 1 ||
			len(list.Items[0].Containers) != 1 || !list.Items[0].Containers[0].Wrapped || len(list.Items[0].Containers[0].Outcomes) != 2 ||
			list.Items[0].Containers[0].Outcomes[1].DecidedBy != "rule 0: Restart In [42]" {
			t.Errorf("explain -o %s: exit %d %v %q %s", format, code, err, errs, out)
		}
	}
	// kubectl's connection flags are there, as kubectl spells them.
	_, _, help := runBin(t, nil, "check", "--help")
	_, _, statusHelp := runBin(t, nil, "status", "--help")
	for _, f := range []string{"--kubeconfig", "--context", "--cluster", "--user", "-n, --namespace", "--server", "--token", "--as ", "--as-group", "--as-uid",
		"--certificate-authority", "--client-certificate", "--client-key", "--insecure-skip-tls-verify", "--tls-server-name", "--request-timeout"} {
		if !strings.Contains(help, f) || !strings.Contains(statusHelp, f) {
			t.Errorf("check and status --help: no %s", f)
		}
	}
	// Arguments after -- are not flags.
	if code, _, errs := runBin(t, nil, "docker-args", "--rules", "/nonexistent", "app:1", "--", "--bogus"); code == exitUsage && strings.Contains(errs, "unknown flag") {
		t.Errorf("docker-args ... -- --bogus: %q: an argument after -- was read as a flag", errs)
	}
}
