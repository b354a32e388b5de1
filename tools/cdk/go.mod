// This folder holds the pinned npm tools (the aws-cdk CLI). Its own go.mod
// keeps node_modules/ out of the bulkrun module's ./... patterns.
module github.com/bulkrun/bulkrun/tools/cdk

go 1.26
