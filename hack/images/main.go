// Command images builds the restart-supervisor and restart-injector images
// as multi-arch OCI indexes with go-containerregistry, without Docker, and
// pushes them (`make images`, `make push`). It assembles binaries the
// Makefile cross-compiled; the images are those of Dockerfile.supervisor
// and Dockerfile.injector, with every timestamp fixed so that the same
// inputs give the same digests. A build tool: no product binary links it.
//
//	images build --bin DIR --ca-bundle FILE --version V --revision SHA --created EPOCH --out DIR
//	images push --layout DIR --registry HOST/PREFIX [--insecure]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

const usage = `usage:
  images build --bin DIR --ca-bundle FILE --version V --revision SHA --created EPOCH [--source URL] [--platforms LIST] --out DIR
  images push --layout DIR --registry HOST/PREFIX [--insecure]
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "build":
		err = runBuild(args[1:], stdout, stderr)
	case "push":
		err = runPush(ctx, args[1:], stdout, stderr)
	default:
		fmt.Fprint(stderr, usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errors.Is(err, errUsage) {
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "images %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

var errUsage = errors.New("usage")

func parse(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "images %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return errUsage
	}
	return nil
}

func runBuild(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	var in Inputs
	fs.StringVar(&in.BinDir, "bin", "", "`DIR` of the binaries, DIR/<os>_<arch>/<name>")
	fs.StringVar(&in.CABundle, "ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "CA bundle `FILE` of the injector image")
	fs.StringVar(&in.Version, "version", "", "`VERSION` of the binaries: the images' tag and version label")
	fs.StringVar(&in.Source, "source", "https://github.com/restart-supervisor/restart-supervisor", "source `URL` label")
	fs.StringVar(&in.Revision, "revision", "", "commit `SHA` label")
	created := fs.String("created", "", "every timestamp of the images, Unix `SECONDS` (SOURCE_DATE_EPOCH, the commit time)")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "comma-separated `OS/ARCH` list")
	out := fs.String("out", "", "`DIR` the OCI layout is written to (replaced)")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	secs, err := strconv.ParseInt(*created, 10, 64)
	if err != nil || secs < 0 {
		return fmt.Errorf("--created: %q is not Unix seconds", *created)
	}
	in.Created = time.Unix(secs, 0).UTC()
	for _, f := range []struct{ flag, value string }{{"bin", in.BinDir}, {"version", in.Version}, {"revision", in.Revision}, {"out", *out}} {
		if f.value == "" {
			return fmt.Errorf("--%s is required", f.flag)
		}
	}
	for _, s := range strings.Split(*platforms, ",") {
		p, err := v1.ParsePlatform(s)
		if err != nil || p.OS == "" || p.Architecture == "" {
			return fmt.Errorf("--platforms: %q is not OS/ARCH", s)
		}
		in.Platforms = append(in.Platforms, *p)
	}
	built, err := Build(in, *out)
	if err != nil {
		return err
	}
	for _, b := range built {
		fmt.Fprintf(stdout, "%s:%s %s\n", b.Name, b.Tag, b.Digest)
		for _, p := range b.Platforms {
			fmt.Fprintf(stdout, "  %-12s %s  %s compressed, %s unpacked\n", p.Platform, p.Digest, mb(p.Compressed), mb(p.Size))
		}
	}
	return nil
}

func mb(n int64) string { return fmt.Sprintf("%.2f MB", float64(n)/1e6) }

func runPush(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	dir := fs.String("layout", "", "`DIR` of the OCI layout `images build` wrote")
	registry := fs.String("registry", "", "`HOST/PREFIX` the images go to, as HOST/PREFIX/restart-supervisor:VERSION")
	insecure := fs.Bool("insecure", false, "plain HTTP (a registry on loopback)")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *dir == "" || *registry == "" {
		return errors.New("--layout and --registry are required")
	}
	pushed, err := Push(ctx, *dir, *registry, *insecure)
	if err != nil {
		return err
	}
	for _, p := range pushed {
		fmt.Fprintf(stdout, "%s\n", p.Pinned)
		fmt.Fprintf(stderr, "pushed %s\n", p.Tagged)
	}
	return nil
}
