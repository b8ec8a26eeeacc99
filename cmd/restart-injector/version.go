package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"

	"sigs.k8s.io/yaml"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// versionInfo is `version -o json|yaml`, in the spirit of kubectl
// version's clientVersion: the stamped version, the toolchain and the
// platform.
type versionInfo struct {
	Version   string `json:"version"`
	GoVersion string `json:"goVersion"`
	Compiler  string `json:"compiler"`
	Platform  string `json:"platform"`
}

// runVersion prints the line `restart-supervisor version` prints, from the
// same stamped variable, so that the injector and the supervisor of one
// build can be matched; -o json or yaml prints the same as an object.
// `restart-injector --version` is the same command.
func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version")
	output := fs.StringP("output", "o", "", "output `FORMAT`: json or yaml (default: one line)")
	if code, ok := parseFlags(fs, "version", args, "usage: restart-injector version [-o json|yaml]   (also: restart-injector --version)\n", stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "restart-injector version: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	v := versionInfo{contract.Version, runtime.Version(), runtime.Compiler, runtime.GOOS + "/" + runtime.GOARCH}
	switch *output {
	case "":
		fmt.Fprintf(stdout, "restart-injector %s %s %s\n", v.Version, v.GoVersion, v.Platform)
	case "json":
		b, _ := json.MarshalIndent(v, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
	case "yaml":
		b, _ := yaml.Marshal(v)
		fmt.Fprintf(stdout, "%s", b)
	default:
		fmt.Fprintf(stderr, "restart-injector version: -o %q: want json or yaml\n", *output)
		return exitUsage
	}
	return exitOK
}
