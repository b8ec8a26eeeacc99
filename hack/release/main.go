// Command release assembles what `make release` publishes besides the
// images (hack/images) and the chart (helm package): the images' OCI
// layout as one tar (for `ctr images import` and `kind load image-archive`
// where no registry is reachable), the CLI and supervisor archives for
// each platform, an SPDX document per archive
// from its binaries' Go build information, the krew plugin manifest of the
// CLI, an SPDX document per image, the chart with the images pinned by
// digest, and the checksums of everything. Every archive is reproducible:
// entries sorted, owned by 0:0, stamped with SOURCE_DATE_EPOCH. Signing is
// the release workflow's (.github/workflows/release.yaml: cosign, keyless).
// A build tool: no product binary links it.
//
//	release archives --bin DIR --version V --created EPOCH --out DIR
//	release layout --layout DIR --created EPOCH --out FILE
//	release sbom --name NAME --version V --created EPOCH --out FILE BINARY...
//	release chart --chart DIR --layout DIR --version V --out DIR
//	release krew --dist DIR --version V --url URL
//	release checksums --dist DIR
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

const usage = `usage:
  release archives --bin DIR --version V --created EPOCH --out DIR
  release layout --layout DIR --created EPOCH --out FILE
  release sbom --name NAME --version V --created EPOCH --out FILE BINARY...
  release chart --chart DIR --layout DIR --version V --out DIR
  release krew --dist DIR --version V --url URL
  release checksums --dist DIR
`

var errUsage = errors.New("usage")

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "archives":
		err = runArchives(args[1:], stdout)
	case "chart":
		err = runChart(args[1:], stdout)
	case "sbom":
		err = runSBOM(args[1:], stdout)
	case "layout":
		err = runLayout(args[1:], stdout)
	case "krew":
		err = runKrew(args[1:], stdout)
	case "checksums":
		err = runChecksums(args[1:], stdout)
	default:
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "release %s: %v\n%s", args[0], err, usage)
		return 2
	}
	fmt.Fprintf(stderr, "release %s: %v\n", args[0], err)
	return 1
}

// flags parses args with fs, and requires every name in required to be
// set and no argument after the flags.
func flags(fs *flag.FlagSet, args []string, required ...string) error {
	if err := flagsAndArgs(fs, args, required...); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected %q", errUsage, fs.Arg(0))
	}
	return nil
}

// flagsAndArgs is flags that leaves the arguments after the flags to the
// caller.
func flagsAndArgs(fs *flag.FlagSet, args []string, required ...string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	for _, name := range required {
		if fs.Lookup(name).Value.String() == "" {
			return fmt.Errorf("%w: --%s is required", errUsage, name)
		}
	}
	return nil
}
