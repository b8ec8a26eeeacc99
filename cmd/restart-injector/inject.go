package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/pmezard/go-difflib/difflib"
	corev1 "k8s.io/api/core/v1"

	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

const injectUsage = `usage: restart-injector inject -f FILE|DIR|- [-f ...] [flags]

Reads Kubernetes manifests (multi-document YAML or JSON, List objects,
directories recursively), wraps every container that carries restart rules
(container restartPolicy/restartPolicyRules, or the annotation
restart-supervisor.dev/rules) and writes the manifests to stdout in the same
format. Other documents are written back unchanged.

  restart-injector inject -f deploy.yaml | kubectl apply -f -

flags:
`

// kubeVersionUsage describes --kubernetes-version of inject and explain.
var kubeVersionUsage = "`VERSION` of Kubernetes (1.34 to " + rules.NewestKube.String() + ") whose API server's validation messages and accepted shapes the restart fields follow (default " + rules.NewestKube.String() + ")"

// fileList collects repeated -f flags.
type fileList []string

func (f *fileList) String() string     { return strings.Join(*f, ",") }
func (f *fileList) Set(v string) error { *f = append(*f, v); return nil }

func runInject(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("inject", flag.ContinueOnError)
	fl.SetOutput(stderr)
	var files fileList
	fl.Var(&files, "f", "manifest file, directory (read recursively) or - for stdin; repeatable")
	image := fl.String("supervisor-image", "", "image of the install init container (default "+injector.DefaultSupervisorImage()+")")
	noLookup := fl.Bool("no-lookup", false, "never contact a registry: containers without command need the annotation "+injector.AnnotationEntrypoint+"<container>")
	timeout := fl.Duration("lookup-timeout", 10*time.Second, "time limit of one image lookup")
	medium := fl.String("volume-medium", "", `emptyDir medium of the injected volumes: "" (node disk) or Memory`)
	diff := fl.Bool("diff", false, "print a unified diff of input and output instead of the output")
	quiet := fl.Bool("q", false, "do not report injected objects on stderr")
	var kubeVersion rules.KubeVersion
	fl.Var(&kubeVersion, "kubernetes-version", kubeVersionUsage)
	fl.Usage = func() { fmt.Fprint(stderr, injectUsage); fl.PrintDefaults() }
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "restart-injector inject: unexpected argument %q (use -f)\n", fl.Arg(0))
		return exitUsage
	}
	if len(files) == 0 {
		fmt.Fprintln(stderr, "restart-injector inject: -f is required (a file, a directory or - for stdin)")
		return exitUsage
	}
	if *medium != "" && *medium != string(corev1.StorageMediumMemory) {
		fmt.Fprintf(stderr, "restart-injector inject: -volume-medium: want \"\" or Memory, got %q\n", *medium)
		return exitUsage
	}
	opts := injector.Options{SupervisorImage: *image, VolumeMedium: corev1.StorageMedium(*medium), KubeVersion: kubeVersion}
	if !*noLookup {
		opts.Resolver = injector.NewResolver(injector.ResolverOptions{Keychain: authn.DefaultKeychain, Timeout: *timeout})
	}
	inj := injector.New(opts)
	if os.Getenv("GOGC") == "" {
		// A short-lived batch run: parsing and emitting YAML allocate a
		// lot, and trading some memory for a third less CPU is the better
		// deal here. GOGC still overrides.
		debug.SetGCPercent(400)
	}

	inputs, err := collectInputs(files, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "restart-injector inject: %v\n", err)
		return exitFailure
	}
	var out bytes.Buffer
	for n, in := range inputs {
		m, err := injector.ReadManifests(in.data)
		if err != nil {
			fmt.Fprintf(stderr, "restart-injector inject: %s: %v\n", in.name, err)
			return exitFailure
		}
		reports, err := inj.InjectManifests(ctx, m)
		if err != nil {
			fmt.Fprintf(stderr, "restart-injector inject: %s: %v\n", in.name, err)
			return exitFailure
		}
		var doc bytes.Buffer
		if _, err := m.WriteTo(&doc); err != nil {
			fmt.Fprintf(stderr, "restart-injector inject: %s: %v\n", in.name, err)
			return exitFailure
		}
		for _, r := range reports {
			for _, w := range r.Warnings {
				fmt.Fprintf(stderr, "warning: %s: %s\n", in.name, w)
			}
			if r.Injected && !*quiet {
				fmt.Fprintf(stderr, "%s: %s injected (%s)\n", in.name, r.Object, strings.Join(r.Containers, ", "))
			}
		}
		if *diff {
			ud := difflib.UnifiedDiff{A: difflib.SplitLines(string(in.data)), B: difflib.SplitLines(doc.String()),
				FromFile: in.name, ToFile: in.name + " (injected)", Context: 3}
			if err := difflib.WriteUnifiedDiff(&out, ud); err != nil {
				fmt.Fprintf(stderr, "restart-injector inject: %v\n", err)
				return exitFailure
			}
			continue
		}
		if n > 0 {
			// Separate the files' streams; JSON is valid YAML, so "---"
			// works between any two.
			if b := out.Bytes(); len(b) > 0 && b[len(b)-1] != '\n' {
				out.WriteByte('\n')
			}
			out.WriteString("---\n")
		}
		out.Write(doc.Bytes())
	}
	if _, err := out.WriteTo(stdout); err != nil {
		fmt.Fprintf(stderr, "restart-injector inject: writing output: %v\n", err)
		return exitFailure
	}
	return exitOK
}

type input struct {
	name string
	data []byte
}

// collectInputs reads the -f arguments in order; directories contribute
// their .yaml, .yml and .json files, recursively, in lexical order.
func collectInputs(files []string, stdin io.Reader) ([]input, error) {
	var out []input
	for _, f := range files {
		if f == "-" {
			b, err := io.ReadAll(stdin)
			if err != nil {
				return nil, fmt.Errorf("reading stdin: %v", err)
			}
			out = append(out, input{"<stdin>", b})
			continue
		}
		st, err := os.Stat(f)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			out = append(out, input{f, b})
			continue
		}
		err = filepath.WalkDir(f, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch strings.ToLower(filepath.Ext(p)) {
			case ".yaml", ".yml", ".json":
			default:
				return nil
			}
			if d.IsDir() {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out = append(out, input{p, b})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
