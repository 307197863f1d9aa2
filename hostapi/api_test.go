package hostapi

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// leakyPackage reports whether an import path is one whose types must not
// appear in the SDK's exported API: krunbox's own lower layers (the VM
// runner, the image cache, the libkrun binding) and internal packages,
// which the SDK's users cannot import or should not depend on.
func leakyPackage(path string) bool {
	const mod = "github.com/krunbox/krunbox/"
	switch path {
	case mod + "hostapi/vmm", mod + "oci", mod + "krun":
		return true
	}
	return strings.Contains(path+"/", "/internal/")
}

// TestExportedAPIHidesInternals walks every exported declaration of the
// package (functions, methods of exported types, types with their
// exported fields and methods, variables and constants) and fails for
// each one whose type mentions a leaky package.
func TestExportedAPIHidesInternals(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var leaks []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		imports := map[string]string{} // local name → path
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			local := filepath.Base(path)
			if imp.Name != nil {
				local = imp.Name.Name
			}
			imports[local] = path
		}
		check := func(what string, n ast.Node) {
			if n == nil {
				return
			}
			ast.Inspect(n, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					if id, ok := sel.X.(*ast.Ident); ok && leakyPackage(imports[id.Name]) {
						leaks = append(leaks, fset.Position(sel.Pos()).String()+": "+what+" mentions "+imports[id.Name]+"."+sel.Sel.Name)
					}
				}
				return true
			})
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() || (d.Recv != nil && !exportedRecv(d.Recv)) {
					continue
				}
				check(d.Name.Name, d.Type)
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							checkType(s.Name.Name, s.Type, check)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								check(n.Name, s.Type)
								for _, v := range s.Values {
									check(n.Name, v)
								}
							}
						}
					}
				}
			}
		}
	}
	slices.Sort(leaks)
	for _, l := range leaks {
		t.Error(l)
	}
}

// exportedRecv reports whether a method's receiver type is exported.
func exportedRecv(recv *ast.FieldList) bool {
	typ := recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	if idx, ok := typ.(*ast.IndexExpr); ok {
		typ = idx.X
	}
	id, ok := typ.(*ast.Ident)
	return ok && id.IsExported()
}

// checkType checks a type declaration: a struct's exported fields, an
// interface's methods, anything else whole.
func checkType(name string, typ ast.Expr, check func(string, ast.Node)) {
	switch t := typ.(type) {
	case *ast.StructType:
		for _, f := range t.Fields.List {
			if len(f.Names) == 0 { // embedded: its fields and methods are promoted
				check(name, f.Type)
			}
			for _, n := range f.Names {
				if n.IsExported() {
					check(name+"."+n.Name, f.Type)
				}
			}
		}
	default:
		check(name, typ)
	}
}
