module github.com/nereid-io/nereid/internal

go 1.26.0
