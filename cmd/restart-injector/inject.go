package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/imagelookup/registry"
	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/manifests"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

const injectUsage = `usage: restart-injector inject -f FILE|DIR|- [-f ...] [flags]

Reads Kubernetes manifests (multi-document YAML or JSON, List objects,
directories recursively), wraps every container that carries restart rules
(container restartPolicy/restartPolicyRules, or the annotation
restart-supervisor.dev/rules) and writes the manifests to stdout in the same
format. Other documents are written back unchanged.

  restart-injector inject -f deploy.yaml | kubectl apply -f -
`

// kubeVersionUsage describes --kubernetes-version of inject and explain.
var kubeVersionUsage = "`VERSION` of Kubernetes (1.34 to " + rules.NewestKube.String() + ") whose API server's validation messages and accepted shapes the restart fields follow (default " + rules.NewestKube.String() + ")"

// backoffFlags defines -backoff-initial and -backoff-max, the nodes'
// CrashLoopBackOff for every wrapped container whose rules annotation
// gives none (injector.Options.Backoff).
func backoffFlags(fl *pflag.FlagSet, b *rules.Backoff) {
	fl.Func("backoff-initial", "`DURATION` of the in-place back-off's second restart (default 10s, the kubelet's)", func(v string) error {
		return setBackoff(&b.Initial, v)
	})
	fl.Func("backoff-max", "longest in-place back-off `DURATION` (default 300s; set the nodes' crashLoopBackOff.maxContainerRestartPeriod where it is set)", func(v string) error {
		return setBackoff(&b.Max, v)
	})
}

func setBackoff(to **rules.Duration, v string) error {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return fmt.Errorf("want a positive duration such as 60s, got %q", v)
	}
	rd := rules.Duration(d)
	*to = &rd
	return nil
}

// nameList collects the names of a repeatable flag, each value one name
// or several separated by commas; empty names are dropped.
type nameList []string

func (n *nameList) String() string { return strings.Join(*n, ",") }
func (n *nameList) Type() string   { return "names" }
func (n *nameList) Set(v string) error {
	for _, name := range strings.Split(v, ",") {
		if name = strings.TrimSpace(name); name != "" {
			*n = append(*n, name)
		}
	}
	return nil
}

// fileList collects repeated -f flags.
type fileList []string

func (f *fileList) String() string     { return strings.Join(*f, ",") }
func (f *fileList) Type() string       { return "files" }
func (f *fileList) Set(v string) error { *f = append(*f, v); return nil }

func runInject(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fl := newFlagSet("inject")
	var files fileList
	fl.VarP(&files, "filename", "f", "manifest file, directory (read recursively) or - for stdin; repeatable")
	image := fl.String("supervisor-image", "", "image of the install init container (default "+injector.DefaultSupervisorImage()+")")
	noLookup := fl.Bool("no-lookup", false, "never contact a registry: containers without command need the annotation "+contract.AnnotationEntrypoint+"<container>")
	timeout := fl.Duration("lookup-timeout", 10*time.Second, "time limit of one image lookup")
	var insecure, allowed registryList
	registryFlags(fl, &insecure, &allowed)
	medium := fl.String("volume-medium", "", `emptyDir medium of the injected volumes: "" (node disk) or Memory`)
	platformUID := fl.Bool("platform-uid", false, "name no runAsUser in the install init container: the platform assigns the UID (OpenShift's restricted-v2 SCC)")
	delivery := fl.String("delivery", "copy", "`HOW` pods get the binaries: copy (an install init container, every release) or image (the supervisor image as an image volume: Kubernetes 1.35+, containerd 2.1+ or CRI-O 1.31+ on every node)")
	var pullSecrets nameList
	fl.Var(&pullSecrets, "supervisor-pull-secret", "`NAME` of a Secret added to every injected pod's imagePullSecrets, to pull the supervisor image; repeatable or comma-separated")
	var backoff rules.Backoff
	backoffFlags(fl, &backoff)
	diff := fl.Bool("diff", false, "print a unified diff of input and output instead of the output")
	quiet := fl.BoolP("quiet", "q", false, "do not report injected objects on stderr")
	var outFile outputFile
	fl.VarP(&outFile, "output", "o", "write the output to `FILE` (replaced whole, only on success) instead of stdout; not a format: the output keeps the input's YAML or JSON")
	keepGoing := fl.Bool("continue-on-error", false, "write documents that cannot be read or injected back unchanged, report them as warnings and exit 0; without it every such document is reported and nothing is written")
	var kubeVersion rules.KubeVersion
	fl.Var(&kubeVersion, "kubernetes-version", kubeVersionUsage)
	if code, ok := parseFlags(fl, "inject", args, injectUsage, stderr); !ok {
		return code
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
	how, err := injector.ParseDelivery(*delivery)
	if err != nil {
		fmt.Fprintf(stderr, "restart-injector inject: -delivery: %v\n", err)
		return exitUsage
	}
	if how == injector.DeliveryImage && kubeVersion != 0 && kubeVersion < rules.Kube135 {
		fmt.Fprintf(stderr, "warning: -delivery image: Kubernetes %s has image volumes off by default (ImageVolume is on from 1.35); unless the gate is on, its API server drops the volume and its mounts and the wrapped containers fail to start\n", kubeVersion)
	}
	// One line, not an error: a pod may well pull a development build
	// from one's own registry, but not by accident.
	if img := cmp.Or(*image, injector.DefaultSupervisorImage()); injector.UnpinnedImage(img) != "" {
		fmt.Fprintf(stderr, "warning: %s\n", injector.UnpinnedWarning(img, injector.UnpinnedImage(img)))
	}
	opts := injector.Options{SupervisorImage: *image, VolumeMedium: corev1.StorageMedium(*medium), KubeVersion: kubeVersion, Backoff: backoff,
		Delivery: how, PullSecrets: pullSecrets, PlatformUID: *platformUID}
	if !*noLookup {
		opts.Resolver = registry.New(registry.Options{Keychain: authn.DefaultKeychain, Timeout: *timeout,
			InsecureRegistries: insecure, AllowedRegistries: allowed})
	}
	inj := injector.New(opts)
	if os.Getenv("GOGC") == "" {
		// A short-lived batch run: parsing and emitting YAML allocate a
		// lot, and trading some memory for a third less CPU is the better
		// deal here. GOGC still overrides.
		debug.SetGCPercent(400)
	}

	run := streamRun{name: "inject", files: files, stdin: stdin, stdout: stdout, stderr: stderr,
		outFile: string(outFile), diff: *diff, keepGoing: *keepGoing, diffLabel: "injected"}
	return run.run(func(r io.Reader, w io.Writer, emit func(*manifests.Document, []manifests.ObjectReport)) error {
		return manifests.InjectStream(ctx, inj, r, w, emit)
	}, func(name string, r manifests.ObjectReport) {
		for _, w := range r.Warnings {
			fmt.Fprintf(stderr, "warning: %s: %s\n", name, w)
		}
		if r.Skipped != "" {
			// Never silent: the user wrote rules that no pod will
			// carry.
			fmt.Fprintf(stderr, "warning: %s: line %d: %s not injected: %s\n", name, r.Line, r.Object, r.Skipped)
		}
		if r.Injected && !*quiet {
			fmt.Fprintf(stderr, "%s: %s injected (%s)\n", name, r.Object, strings.Join(r.Containers, ", "))
		}
	})
}
