test_unit() { :; }
