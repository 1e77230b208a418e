package main

import "fmt"

func errNotYet(what string) error { return fmt.Errorf("%s: not implemented yet", what) }
