"""The CPM (control processing module): the P4Runtime controller and its rule compilers."""
