// Command e2e-cluster starts or stops the single-node end-to-end cluster of
// test/e2e/cluster by hand: `up` leaves it running and prints a KUBECONFIG,
// `down` removes everything it created. hack/e2e-up.sh and hack/e2e-down.sh
// wrap it.
//
// Exit codes: 0 ok, 1 the cluster could not be brought up or torn down,
// 2 usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/restart-supervisor/restart-supervisor/test/e2e/cluster"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch os.Args[1] {
	case "up":
		os.Exit(up(ctx, os.Args[2:]))
	case "down":
		fs := flag.NewFlagSet("down", flag.ContinueOnError)
		dir := fs.String("dir", cluster.DefaultDir, "state directory")
		if fs.Parse(os.Args[2:]) != nil {
			os.Exit(2)
		}
		unlock, err := cluster.Lock(*dir, false)
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e-cluster down:", err)
			os.Exit(1)
		}
		defer unlock()
		if err := cluster.Down(*dir, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "e2e-cluster down:", err)
			os.Exit(1)
		}
	case "-h", "--help", "help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "e2e-cluster: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: e2e-cluster up [--dir DIR] [--bin-dir DIR] [--restart-rules=true|false] [--controller-manager] [--supervised]
       e2e-cluster down [--dir DIR]`)
}

func up(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	opts := cluster.Options{}
	fs.StringVar(&opts.Dir, "dir", cluster.DefaultDir, "state directory")
	fs.StringVar(&opts.BinDir, "bin-dir", defaultBinDir(), "directory with etcd, kube-apiserver, kubelet, kube-controller-manager")
	fs.BoolVar(&opts.RestartRules, "restart-rules", true, "ContainerRestartRules feature gate in the API server and kubelet")
	fs.BoolVar(&opts.ControllerManager, "controller-manager", true, "start kube-controller-manager (job controller only)")
	supervised := fs.Bool("supervised", false, "import the supervisor image and run the webhook on the host, registered from deploy/ (implies --restart-rules=false unless given)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	gateSet := false
	fs.Visit(func(f *flag.Flag) { gateSet = gateSet || f.Name == "restart-rules" })
	if *supervised {
		opts.SupervisorImage = true
		if !gateSet {
			opts.RestartRules = false
		}
	}
	repo, err := repoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e-cluster:", err)
		return 1
	}
	opts.Repo = repo
	// The node's lock for the bring-up, and no cluster of another user
	// replaced: a test's (it holds the lock) or one brought up by hand.
	unlock, err := cluster.Lock(opts.Dir, false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e-cluster up:", err)
		return 1
	}
	defer unlock()
	if pid, running := cluster.ManualCluster(opts.Dir); running {
		fmt.Fprintf(os.Stderr, "e2e-cluster up: a cluster brought up by hand runs in %s (kube-apiserver pid %d): hack/e2e-down.sh first\n", opts.Dir, pid)
		return 1
	}
	c, err := cluster.Up(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e-cluster up:", err)
		return 1
	}
	if *supervised {
		if err := c.StartWebhook(ctx, repo); err != nil {
			fmt.Fprintln(os.Stderr, "e2e-cluster up: webhook:", err)
			_ = cluster.Down(opts.Dir, os.Stderr)
			return 1
		}
	}
	if err := cluster.MarkManual(c); err != nil {
		fmt.Fprintln(os.Stderr, "e2e-cluster up:", err)
		_ = cluster.Down(opts.Dir, os.Stderr)
		return 1
	}
	fmt.Printf("export KUBECONFIG=%s\n", c.Kubeconfig)
	return 0
}

func defaultBinDir() string {
	if d := os.Getenv("KUBE_BIN_DIR"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "restart-supervisor", "kube-v1.34.4")
}

func repoRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", errors.New("not inside the repository (no go.mod found)")
		}
		d = parent
	}
}
