package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentstatus"
)

// The directives of cobra's completion protocol, which kubectl's plugin
// completion relays (k8s.io/kubectl/pkg/cmd/plugin/plugin_completion.go,
// v0.34.4: the last line ":N" of the executable's output).
const (
	compDirectiveDefault    = 0 // the shell's file completion
	compDirectiveNoFileComp = 4
)

// maxCompletionNames bounds the namespaces or pods one completion lists.
const maxCompletionNames = 500

// runPluginCompletion is kubectl's plugin completion of `kubectl
// restarts`: kubectl runs kubectl_complete-restarts (a link to this
// binary) with the words after the plugin's name, the last one the word
// being completed, and shows the lines it prints. Flags come from status's
// own flag set, -o from its formats, -n from the cluster's namespaces and
// POD from the pods of the namespace, each list read once with a bound.
func runPluginCompletion(ctx context.Context, args []string, stdout io.Writer) int {
	if len(args) == 0 {
		args = []string{""}
	}
	toComplete, before := args[len(args)-1], args[:len(args)-1]
	fs, _ := statusFlags()
	var out []string
	directive := compDirectiveNoFileComp
	prev := ""
	if len(before) > 0 {
		prev = before[len(before)-1]
	}
	valueOf := func(p string) *pflag.Flag {
		if strings.HasPrefix(p, "--") && !strings.Contains(p, "=") {
			return fs.Lookup(p[2:])
		}
		if len(p) == 2 && p[0] == '-' {
			return fs.ShorthandLookup(p[1:])
		}
		return nil
	}
	switch f := valueOf(prev); {
	case f != nil && f.NoOptDefVal == "":
		switch f.Name {
		case "output":
			out = agentstatus.StatusFormats
		case "namespace", "agent-namespace":
			// The flag before the word waits for it: the kubeconfig
			// flags are in the words before that.
			out = completionNames(ctx, before[:len(before)-1], "")
		case "kubeconfig":
			directive = compDirectiveDefault
		}
	case strings.HasPrefix(toComplete, "-"):
		fs.VisitAll(func(f *pflag.Flag) {
			out = append(out, "--"+f.Name)
			if f.Shorthand != "" {
				out = append(out, "-"+f.Shorthand)
			}
		})
	default:
		out = completionNames(ctx, before, "pods")
	}
	for _, w := range out {
		if strings.HasPrefix(w, toComplete) {
			fmt.Fprintln(stdout, w)
		}
	}
	fmt.Fprintf(stdout, ":%d\n", directive)
	return exitOK
}

// completionNames lists the namespaces, or with what "pods" the pods of
// the namespace the words name (-n, else the kubeconfig context's), from
// the cluster the words' kubeconfig flags choose. Errors list nothing: a
// completion says nothing rather than something wrong.
func completionNames(ctx context.Context, words []string, what string) []string {
	fs, _ := statusFlags()
	fs.ParseErrorsAllowlist.UnknownFlags = true
	fs.SetOutput(io.Discard)
	if fs.Parse(words) != nil {
		return nil
	}
	get := func(name string) string { v, _ := fs.GetString(name); return v }
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = get("kubeconfig")
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: get("context")})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	opts := metav1.ListOptions{Limit: maxCompletionNames}
	var names []string
	if what != "pods" {
		l, err := client.CoreV1().Namespaces().List(ctx, opts)
		if err != nil {
			return nil
		}
		for _, n := range l.Items {
			names = append(names, n.Name)
		}
		return names
	}
	ns := get("namespace")
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil
		}
	}
	l, err := client.CoreV1().Pods(ns).List(ctx, opts)
	if err != nil {
		return nil
	}
	for _, p := range l.Items {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	return names
}
