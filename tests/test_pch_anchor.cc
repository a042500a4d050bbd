// The object that carries tests/test_pch.h, the precompiled header every
// GoogleTest binary of cosched_add_test reuses (tests/CMakeLists.txt).
