module github.com/restart-supervisor/restart-supervisor

go 1.26.0

require (
	github.com/fsnotify/fsnotify v1.10.1 // indirect
	golang.org/x/sys v0.50.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
	k8s.io/api v0.35.10 // indirect
	k8s.io/apimachinery v0.35.10 // indirect
)
