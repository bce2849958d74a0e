package controllers

// FinalizerName guards deletion of objects kao must clean up after.
const FinalizerName = "kao.io/finalizer"
